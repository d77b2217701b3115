package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

// suite is what TestMain sets up once for the package.
var suite struct {
	bin       string // the built pipeline binary; "" when not built
	noBinary  string // why it was not built
	broker    Broker // nil when none could be had
	brokerErr error
	runID     string // makes names unique across runs on a long-lived broker
	// usedContainers says a test ran containers through testcontainers-go
	// (image_engine.go).
	usedContainers atomic.Bool
}

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "integration: FAIL: "+format+"\n", args...)
		return 1
	}
	suite.runID = randomHex(3)

	dir := os.Getenv("E2E_LOG_DIR")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "pipeline-integration-"); err != nil {
			return fail("%v", err)
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("%v", err)
	}

	if os.Getenv("INTEGRATION_NO_BINARY") == "1" {
		suite.noBinary = "the pipeline binary was not built (INTEGRATION_NO_BINARY=1)"
	} else {
		bin, err := buildPipeline(dir)
		if err != nil {
			return fail("building cmd/pipeline: %v", err)
		}
		suite.bin = bin
	}

	// Generous: a first kafka-local run fetches the Kafka jars with Maven,
	// a first testcontainers run pulls the image.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	b, err := startBroker(ctx, brokerEnv{bin: suite.bin, dir: dir})
	cancel()
	switch {
	case err == nil:
		suite.broker = b
		fmt.Printf("integration: broker kind=%s version=%s addr=%s\n", b.Kind(), b.Version(), b.Addr())
	case suite.bin == "" && os.Getenv("KAFKA_BOOTSTRAP") == "" && os.Getenv("KAFKA_LOCAL") != "1":
		// Only the checker's own tests can run; broker tests fail by name.
		suite.brokerErr = err
		fmt.Printf("integration: no broker (%v)\n", err)
	default:
		return fail("%v", err)
	}

	code := m.Run()
	closeImages()
	if suite.broker != nil {
		suite.broker.Close()
	}
	if code == 0 {
		// Closing the broker reaps the last child; anything still running
		// now was started by a test and not stopped.
		if err := goleak.Find(leakOptions(suite.broker)...); err != nil {
			return fail("leaked goroutines: %v", err)
		}
	}
	return code
}

// leakOptions are the goroutines testcontainers-go leaves behind when the
// broker or the image tests used it: its connection to the reaper
// container (which removes the broker's container should this process die)
// and idle HTTP connections to the Docker engine, for the life of the
// process.
func leakOptions(b Broker) []goleak.Option {
	if (b == nil || b.Kind() != "testcontainers") && !suite.usedContainers.Load() {
		return nil
	}
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}

// buildPipeline builds ./cmd/pipeline of this module into dir.
func buildPipeline(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "pipeline")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/pipeline")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build -o %s ./cmd/pipeline in %s: %v\n%s", bin, root, err, out)
	}
	return bin, nil
}

// requireBinary returns the pipeline binary or fails the test: a test that
// cannot run its process must not pass as skipped.
func requireBinary(t testing.TB) string {
	t.Helper()
	if suite.bin == "" {
		t.Fatal(suite.noBinary)
	}
	return suite.bin
}

func requireBroker(t testing.TB) Broker {
	t.Helper()
	if suite.broker == nil {
		t.Fatalf("no broker for this run: %v", suite.brokerErr)
	}
	return suite.broker
}

// env is a test's view of the package broker: its clients, names and logs.
type env struct {
	t      testing.TB
	broker Broker
	seeds  []string
	cl     *kgo.Client
	adm    *kadm.Client
	logDir string

	// group is the pipeline's name and consumer group; input and output its
	// topics. All three are unique to the test.
	group, input, output string
}

var nameSeq atomic.Int64

func newEnv(t testing.TB) *env {
	t.Helper()
	b := requireBroker(t)
	e := &env{t: t, broker: b, seeds: Seeds(b)}
	var err error
	if e.cl, err = kgo.NewClient(kgo.SeedBrokers(e.seeds...)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.cl.Close)
	e.adm = kadm.NewClient(e.cl)

	e.group = fmt.Sprintf("e2e-%s-%s-%d", slug(t.Name()), suite.runID, nameSeq.Add(1))
	e.input, e.output = e.group+"-in", e.group+"-out"

	if dir := os.Getenv("E2E_LOG_DIR"); dir != "" {
		e.logDir = filepath.Join(dir, e.group)
		if err := os.MkdirAll(e.logDir, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		e.logDir = t.TempDir()
	}
	t.Cleanup(func() {
		if lt, ok := b.(logTailer); ok && t.Failed() {
			t.Logf("broker log tail:\n%s", lt.LogTail(30))
		}
	})
	t.Logf("broker %s %s at %s; group %s, topics %s → %s", b.Kind(), b.Version(), b.Addr(), e.group, e.input, e.output)
	return e
}

// slug makes a test name usable in topic names (at most 249 bytes of
// [a-zA-Z0-9._-]), short enough to leave room for the rest.
func slug(name string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		default:
			return '-'
		}
	}, name)
	if len(s) > 40 {
		s = s[:40]
	}
	return strings.Trim(s, "-")
}

// config is the default keyed pass-through of the end-to-end tests.
func (e *env) config(partitions int) PipelineConfig {
	return PipelineConfig{
		Name:               e.group,
		Brokers:            e.seeds,
		InstanceID:         "i1",
		CheckpointInterval: 300 * time.Millisecond,
		CheckpointTimeout:  10 * time.Second,
		TxnTimeout:         30 * time.Second,
		SessionTimeout:     10 * time.Second,
		Partitions:         partitions,
		Input:              e.input,
		Output:             e.output,
	}
}

func (e *env) startPipeline(cfgPath string) *Process {
	e.t.Helper()
	return StartPipeline(e.t, e.logDir, requireBinary(e.t), cfgPath)
}

// committed returns the group's committed offsets on the input, summed,
// and per partition.
func (e *env) committed() (int64, map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	offsets, _, err := GroupOffsets(ctx, e.adm, e.group, e.input)
	var sum int64
	for _, o := range offsets {
		sum += o
	}
	return sum, offsets, err
}

// inputEnd returns the input's end offsets.
func (e *env) inputEnd() map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	listed, err := e.adm.ListEndOffsets(ctx, e.input)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		e.t.Fatalf("listing end offsets of %s: %v", e.input, err)
	}
	end := make(map[int32]int64)
	listed.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return end
}
