package bench

import (
	"bytes"
	"image/png"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestBenchmarksPageIsWhatTheCommittedResultsSay recomputes the throughput
// tables of docs/benchmarks.md (and of bench/results/README.md, the older
// sweep's) from the result files committed under bench/results/, as
// `bench -report` does, and checks the page shows them
// unchanged: the figures a user reads are the ones anyone can reproduce
// from the repository.
func TestBenchmarksPageIsWhatTheCommittedResultsSay(t *testing.T) {
	tableRE := regexp.MustCompile(`records/s relative to the (?:copy|limit) arm of the same round \(median over rounds\), ([^:]+):\n\n((?:\|.*\n)+)`)
	// The older, wider sweep is kept with its result files.
	for _, c := range []struct{ pageFile, file, heading string }{
		{"results/README.md", "results/kafka.json", "**Kafka 4.4.0**"},
		{"results/README.md", "results/embedded.json", "**Embedded broker**"},
		{"../docs/benchmarks.md", "results/kafka-kstreams.json", "**Kafka 4.4.0 against the limit and Kafka Streams**"},
		{"../docs/benchmarks.md", "results/kafka-1k.json", "**Kafka 4.4.0, 1 KB records, against the limit and Kafka Streams**"},
	} {
		page, err := os.ReadFile(c.pageFile)
		if err != nil {
			t.Fatal(err)
		}
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
			t.Fatalf("%s has no %s table", c.pageFile, c.heading)
		}
		shown := page[i+len(c.heading)+2:]
		if !bytes.HasPrefix(shown, m[2]) {
			end := bytes.Index(shown, []byte("\n\n"))
			t.Errorf("%s, %s: the table is not what -report computes from %s.\npage:\n%s\n-report:\n%s",
				c.pageFile, c.heading, c.file, shown[:max(end, 0)], strings.TrimSpace(string(m[2])))
		}
	}
}

// TestBenchmarksPageShowsTheKStreamsSweep checks the per-configuration
// tables of the sweeps against the limit and Kafka Streams: each is on the
// page as -report prints it from the committed results, and so are their
// restores.
func TestBenchmarksPageShowsTheKStreamsSweep(t *testing.T) {
	for _, c := range []struct {
		pageFile, file string
		restores       int
	}{
		{"../docs/benchmarks.md", "results/kafka-kstreams.json", 2},
		{"../docs/benchmarks.md", "results/kafka-joins.json", 0},
		{"../docs/benchmarks.md", "results/kafka-1k.json", 0},
		// The older restore run is kept with its result files.
		{"results/README.md", "results/kafka-restore.json", 2},
	} {
		page, err := os.ReadFile(c.pageFile)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ReadJSON(c.file)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		Report(&out, res)
		tables := regexp.MustCompile(`(?m)^#### [^\n]*\n\n((?:\|.*\n)+)`).FindAllSubmatch(out.Bytes(), -1)
		if len(tables) != 2 {
			t.Fatalf("%s: -report printed %d configuration tables, want 2:\n%s", c.file, len(tables), out.String())
		}
		for _, m := range tables {
			if !bytes.Contains(page, m[1]) {
				t.Errorf("%s does not show this table of %s:\n%s", c.pageFile, c.file, m[1])
			}
		}
		restores := regexp.MustCompile(`(?m)^restore of .*$`).FindAll(out.Bytes(), -1)
		if len(restores) != c.restores {
			t.Fatalf("%s: -report printed %d restore lines, want %d:\n%s", c.file, len(restores), c.restores, out.String())
		}
		for _, l := range restores {
			if !bytes.Contains(page, l) {
				t.Errorf("%s does not show this restore of %s:\n%s", c.pageFile, c.file, l)
			}
		}
	}
}

// TestBenchmarksPagePlotIsWhatTheCommittedResultsDraw: the plot on
// docs/benchmarks.md is, pixel for pixel, what `bench -report … -plot`
// draws from the committed sweeps it shows.
func TestBenchmarksPagePlotIsWhatTheCommittedResultsDraw(t *testing.T) {
	const plot = "benchmarks-kafka.png"
	page, err := os.ReadFile("../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("]("+plot+")")) {
		t.Fatalf("docs/benchmarks.md does not show %s", plot)
	}
	var results []*Results
	for _, f := range []string{"results/kafka-kstreams.json", "results/kafka-1k.json"} {
		res, err := ReadJSON(f)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	f, err := os.Open("../docs/" + plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	shown, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	want := Bars(results)
	if shown.Bounds() != want.Bounds() {
		t.Fatalf("docs/%s is %v; the results draw %v", plot, shown.Bounds(), want.Bounds())
	}
	for y := want.Bounds().Min.Y; y < want.Bounds().Max.Y; y++ {
		for x := want.Bounds().Min.X; x < want.Bounds().Max.X; x++ {
			r0, g0, b0, a0 := shown.At(x, y).RGBA()
			r1, g1, b1, a1 := want.At(x, y).RGBA()
			if r0 != r1 || g0 != g1 || b0 != b1 || a0 != a1 {
				t.Fatalf("docs/%s differs at (%d,%d) from what the results draw: run the -report command on the page", plot, x, y)
			}
		}
	}
}
