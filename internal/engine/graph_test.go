package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pipeline-run/pipeline/config"
)

// TestABrokenStepIsReportedOnce: a step whose own settings are wrong is
// reported there, and a step reading one of its outputs gets no second,
// misleading error about outputs it cannot know.
func TestABrokenStepIsReportedOnce(t *testing.T) {
	cfg := parseConfig(t, "sources: {in: {topics: [in]}}\n"+
		"steps:\n  - {name: r, route: [not, a, mapping]}\n  - {from: r.hot, map: value}\n"+
		"sinks: {out: {topic: out}}\n")
	_, err := Build(cfg, nil)
	var be config.Errors
	if !errors.As(err, &be) {
		t.Fatalf("Build: %v, want config.Errors", err)
	}
	var paths []string
	for _, e := range be {
		paths = append(paths, e.Path)
	}
	for _, p := range paths {
		if !strings.HasPrefix(p, "steps[0].route") {
			t.Fatalf("errors at %v, want them all under steps[0].route:\n%v", paths, err)
		}
	}
}
