package integration

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PassThroughDoubled is the map step whose outputs DoubledSeq checks.
const PassThroughDoubled = "{k: value.k, seq: value.seq, doubled: value.seq * 2}"

// PipelineConfig is the part of the pipeline's YAML the end-to-end tests
// vary: one source topic, one map step, one sink topic.
type PipelineConfig struct {
	// Name is also the consumer group id.
	Name       string
	Brokers    []string
	InstanceID string

	CheckpointInterval time.Duration
	// CheckpointTimeout bounds one checkpoint; the pipeline requires
	// TxnTimeout > CheckpointInterval + CheckpointTimeout.
	CheckpointTimeout time.Duration
	TxnTimeout        time.Duration
	SessionTimeout    time.Duration // 0: the pipeline's default
	Partitions        int

	Input, Output string
	// Map is the map step's value expression; empty means PassThroughDoubled.
	Map string
}

// YAML renders the config file.
func (c PipelineConfig) YAML() string {
	q := strconv.Quote // Go's double-quoted strings are valid YAML ones for what we write
	brokers := make([]string, len(c.Brokers))
	for i, b := range c.Brokers {
		brokers[i] = q(b)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", q(c.Name))
	fmt.Fprintf(&b, "brokers: [%s]\n", strings.Join(brokers, ", "))
	fmt.Fprintf(&b, "instance_id: %s\n", q(c.InstanceID))
	fmt.Fprintf(&b, "checkpoint: {interval: %s, timeout: %s}\n", c.CheckpointInterval, c.CheckpointTimeout)
	fmt.Fprintf(&b, "transactions: {timeout: %s}\n", c.TxnTimeout)
	if c.SessionTimeout > 0 {
		fmt.Fprintf(&b, "consumer: {session_timeout: %s}\n", c.SessionTimeout)
	}
	fmt.Fprintf(&b, "topics: {partitions: %d}\n", c.Partitions)
	fmt.Fprintf(&b, "sources:\n  in: {topics: [%s]}\n", q(c.Input))
	fmt.Fprintf(&b, "steps:\n  - map: {value: %s}\n", q(cmp.Or(c.Map, PassThroughDoubled)))
	fmt.Fprintf(&b, "sinks:\n  out: {topic: %s}\n", q(c.Output))
	return b.String()
}

// Write writes the config to dir/<name>.yaml and returns its path.
func (c PipelineConfig) Write(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, c.Name+".yaml")
	if err := os.WriteFile(path, []byte(c.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// StartPipeline starts `bin run -c cfgPath`, its output under logDir, at
// the log level E2E_LOG_LEVEL names (the binary's default if unset).
func StartPipeline(t testing.TB, logDir, bin, cfgPath string) *Process {
	t.Helper()
	args := []string{"run", "-c", cfgPath}
	if l := os.Getenv("E2E_LOG_LEVEL"); l != "" {
		args = append(args, "--log-level", l)
	}
	return StartProcess(t, logDir, "pipeline", bin, args...)
}
