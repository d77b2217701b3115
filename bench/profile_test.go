package bench

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProfileAndTrace: after the sweep, one more run of the profiled arm
// writes a CPU profile, the allocation profiles before and after it and an
// execution trace, and says so.
func TestProfileAndTrace(t *testing.T) {
	dir := t.TempDir()
	cpu, tr, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "run.trace"), filepath.Join(dir, "mem.pprof")
	_, out := sweepWith(t, Options{
		Records: 2000, Sizes: []int{100}, Partitions: []int{2}, Broker: "embedded",
		Intervals: []time.Duration{100 * time.Millisecond}, Rounds: 1, Arms: []string{"pass"},
		MaxRecords: 1000000, RunTimeout: 30 * time.Second, LatencyFor: time.Second,
		CPUProfile: cpu, Trace: tr, MemProfile: mem, ProfileArms: []string{"pass"}, ProfileInterval: 100 * time.Millisecond, ProfileRecords: 5000,
	})
	for _, p := range []string{cpu, mem, mem + ".base"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// A profile is a gzipped protocol buffer with samples in it.
		if zr, err := gzip.NewReader(bytes.NewReader(b)); err != nil {
			t.Errorf("%s is not gzipped: %v", p, err)
		} else if pb, err := io.ReadAll(zr); err != nil || len(pb) < 100 {
			t.Errorf("%s holds %d bytes (%v)", p, len(pb), err)
		}
	}
	b, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("the trace does not start with a trace header: %q", b[:min(len(b), 16)])
	}
	if !strings.Contains(out, "profile of pass (100ms checkpoint, 100 B, 2 partitions, 5000 records): "+cpu+", "+mem+", "+mem+".base, "+tr) {
		t.Errorf("the profiled run is not in the output:\n%s", out)
	}
}
