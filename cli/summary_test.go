package cli

import (
	"strings"
	"testing"
)

// TestSummaryShowsEveryInput checks that the graph summary names every
// stream a step reads, a key_by's included.
func TestSummaryShowsEveryInput(t *testing.T) {
	path := writeFile(t, `name: m
brokers: [127.0.0.1:9]
sources: {a: {topics: [ta]}, b: {topics: [tb]}}
steps:
  - {name: k, from: [a, b], key_by: value.x}
  - {name: f, from: [a, b], filter: "true"}
sinks: {o: {from: k, topic: out}, o2: {from: f, topic: out2}}
`)
	code, out, errs := runCLI(t, "validate", "-c", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, w := range []string{"key_by k<-a+b->m-k-repartition", "filter f<-a+b"} {
		if !strings.Contains(out, w) {
			t.Errorf("summary lacks %q:\n%s", w, out)
		}
	}
}
