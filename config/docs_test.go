package config

import (
	"os"
	"strings"
	"testing"
)

// TestDocsListEveryKey keeps docs/config.md in step with the code: every
// setting with its environment variable, and every key of a source, a
// sink and a step.
func TestDocsListEveryKey(t *testing.T) {
	data, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, s := range (&Config{}).settings() {
		if !strings.Contains(doc, "| `"+s.key+"` |") {
			t.Errorf("docs/config.md has no row for %s", s.key)
		}
		if !strings.Contains(doc, "`"+envVar(s.key)+"`") {
			t.Errorf("docs/config.md does not name %s for %s", envVar(s.key), s.key)
		}
	}
	var keys []string
	for _, k := range sourceKeys {
		keys = append(keys, "sources.<name>."+k)
	}
	for _, k := range sinkKeys {
		keys = append(keys, "sinks.<name>."+k)
	}
	keys = append(keys, "steps[i].name", "steps[i].from", "topics.configs", "topics.create")
	for _, k := range keys {
		if strings.HasSuffix(k, ".brokers") || strings.HasSuffix(k, ".bootstrap") || strings.HasSuffix(k, ".cluster") {
			continue // the one-cluster rule has its own section
		}
		if !strings.Contains(doc, "| `"+k+"` |") {
			t.Errorf("docs/config.md has no row for %s", k)
		}
	}
	for _, k := range knownKeys("") {
		if !strings.Contains(doc, "| `"+k+"` |") {
			t.Errorf("docs/config.md has no row for the top-level key %s", k)
		}
	}
}
