package runner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/runner"
)

const file = `name: t
brokers: [127.0.0.1:9]
sources: {in: {topics: [in]}}
steps:
  - {name: a, filter: "value.n > 1"}
  - {name: b, map: "value.n"}
sinks: {out: {topic: out}}
`

func noEnv(string) (string, bool) { return "", false }

// TestNewChecksAConfigurationChangedByHand: the graph relies on the
// configuration's rules (names, streams), so New checks them again on a
// Config changed after Parse instead of building a wrong graph.
func TestNewChecksAConfigurationChangedByHand(t *testing.T) {
	cfg, err := runner.Parse([]byte(file), "t.yaml", noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.New(cfg, nil); err != nil {
		t.Fatalf("New on the parsed file: %v", err)
	}
	cfg.Steps[1].Name = "a"
	_, err = runner.New(cfg, nil)
	var ce config.Errors
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `steps[1].name (line 6): name "a" is already used by steps[0]`) {
		t.Fatalf("New after renaming a step: %v", err)
	}
}

// TestGraphProblemsCarryTheirLine: a problem only the graph finds (here an
// output that does not exist) has the path and line validate shows.
func TestGraphProblemsCarryTheirLine(t *testing.T) {
	bad := strings.Replace(file, "sinks: {out: {topic: out}}", "sinks: {out: {topic: out, from: a.hot}}", 1)
	_, err := runner.Parse([]byte(bad), "t.yaml", noEnv, nil)
	if err == nil || !strings.Contains(err.Error(), "sinks.out.from (line 7): a has no named outputs") {
		t.Fatalf("got %v", err)
	}
}
