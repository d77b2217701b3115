package bench

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestBenchmarksPageIsWhatTheCommittedResultsSay recomputes the throughput
// tables of docs/benchmarks.md from the result files committed under
// bench/results/, as `bench -report` does, and checks the page shows them
// unchanged: the figures a user reads are the ones anyone can reproduce
// from the repository.
func TestBenchmarksPageIsWhatTheCommittedResultsSay(t *testing.T) {
	page, err := os.ReadFile("../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	tableRE := regexp.MustCompile(`records/s relative to the (?:copy|limit) arm of the same round \(median over rounds\), ([^:]+):\n\n((?:\|.*\n)+)`)
	for _, c := range []struct{ file, heading string }{
		{"results/kafka.json", "**Kafka 4.4.0**"},
		{"results/embedded.json", "**Embedded broker**"},
	} {
		res, err := ReadJSON(c.file)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		Report(&out, res)
		m := tableRE.FindSubmatch(out.Bytes())
		if m == nil {
			t.Fatalf("%s: -report printed no ratio table:\n%s", c.file, out.String())
		}
		i := bytes.Index(page, []byte(c.heading+"\n\n"))
		if i < 0 {
			t.Fatalf("docs/benchmarks.md has no %s table", c.heading)
		}
		shown := page[i+len(c.heading)+2:]
		if !bytes.HasPrefix(shown, m[2]) {
			end := bytes.Index(shown, []byte("\n\n"))
			t.Errorf("docs/benchmarks.md, %s: the table is not what -report computes from %s.\npage:\n%s\n-report:\n%s",
				c.heading, c.file, shown[:max(end, 0)], strings.TrimSpace(string(m[2])))
		}
	}
}
