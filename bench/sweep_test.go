package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sweep runs a one-round sweep of arms on the embedded broker, with a
// backlog of records records of 100 B in 2 partitions and 100 ms
// checkpoints, latency runs if latency is set, and returns its results and
// what it printed.
func sweep(t *testing.T, records int, latency bool, arms ...string) (*Results, string) {
	t.Helper()
	return sweepWith(t, sweepOptions(records, latency, arms...))
}

// sweepOptions are the options of sweep.
func sweepOptions(records int, latency bool, arms ...string) Options {
	return Options{
		Broker: "embedded", Records: records, Sizes: []int{100}, Partitions: []int{2},
		Intervals: []time.Duration{100 * time.Millisecond}, Rounds: 1, Arms: arms,
		Latency: latency, LatencyFor: 300 * time.Millisecond, MaxRecords: 1000000, RunTimeout: 30 * time.Second,
	}
}

// sweepWith runs the sweep o on the embedded broker, its JSON written to a
// temporary file, and returns its results and what it printed.
func sweepWith(t *testing.T, o Options) (*Results, string) {
	t.Helper()
	res, out, _ := sweepMessages(t, o)
	return res, out
}

// sweepMessages is sweepWith that also returns the messages the run wrote
// as it went.
func sweepMessages(t *testing.T, o Options) (*Results, string, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a broker")
	}
	o.JSON = filepath.Join(t.TempDir(), "r.json")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, msg strings.Builder
	if err := Run(ctx, o, &out, &msg); err != nil {
		t.Fatalf("Run: %v\n%s\n%s", err, out.String(), msg.String())
	}
	res, err := ReadJSON(o.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String(), msg.String()
}
