package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// out is one record a hand-built checkpoint writes: to the sink topic with
// source-position headers, to the sink topic with none, or to the
// dead-letter topic naming its input.
type out struct {
	src    int64  // offset in in/0 of the input it names
	output string // HeaderOutput; "" for a record with no position headers
	dead   bool   // a dead letter instead
}

func o(src int64, output string) out { return out{src: src, output: output} }
func dead(src int64) out             { return out{src: src, dead: true} }

// each returns one output a/0 for each input from first to last.
func each(first, last int64) []out {
	var os []out
	for i := first; i <= last; i++ {
		os = append(os, o(i, "a/0"))
	}
	return os
}

func cat(parts ...[]out) []out {
	var all []out
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// sourced is one hand-built checkpoint of a pipeline writing source
// positions: the input range its progress record claims and what its
// transaction writes.
type sourced struct {
	first, last int64
	outs        []out
	claim       int64 // output records its progress record says it wrote to out/0; -1: as many as it wrote there
	abort       bool
}

// t0 is when the first hand-built checkpoint commits; the i-th (from 0,
// aborted ones included) commits i minutes later.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }

// buildSourced writes inputs records to in/0, then each checkpoint in one
// transaction of producer i1 with its progress record, and commits the
// group's offset at the last committed checkpoint's end. Checkpoint i (from
// 1) is i1/r/i.
func buildSourced(t *testing.T, inputs int, cps []sourced) *kgo.Client {
	t.Helper()
	addr := testkit.NewKafka(t, kfake.SeedTopics(1, "in", "out", "dlq", "progress")).Addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for i := range inputs {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("pipeline-i1"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	end := int64(-1)
	for i, cp := range cps {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		wrote := map[string]int64{}
		for j, w := range cp.outs {
			rec := &kgo.Record{Topic: "out", Value: fmt.Appendf(nil, "%d-%d", i, j)}
			switch {
			case w.dead:
				rec.Topic = "dlq"
				rec.Headers = []kgo.RecordHeader{{Key: wire.HeaderTopic, Value: []byte("in")},
					{Key: wire.HeaderPartition, Value: []byte("0")}, {Key: wire.HeaderOffset, Value: fmt.Append(nil, w.src)}}
			case w.output != "":
				rec.Headers = []kgo.RecordHeader{{Key: wire.HeaderSource, Value: fmt.Appendf(nil, "in/0@%d", w.src)},
					{Key: wire.HeaderOutput, Value: []byte(w.output)}}
			}
			if err := txn.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
			wrote[rec.Topic]++
		}
		if cp.claim >= 0 {
			wrote["out"] = cp.claim
		}
		p := wire.Progress{Version: 1, Pipeline: "p", Group: "g", Instance: "i1", Run: "r", Checkpoint: wire.CheckpointID(i + 1),
			Time: at(i).UnixMilli(), Inputs: []wire.ProgressInput{{Topic: "in", Partition: 0, First: cp.first, Last: cp.last}}}
		for _, topic := range []string{"dlq", "out"} {
			if wrote[topic] > 0 {
				p.Outputs = append(p.Outputs, wire.ProgressOutput{Topic: topic, Partition: 0, Records: wrote[topic]})
			}
		}
		b, _ := json.Marshal(p)
		if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "progress", Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(!cp.abort)); err != nil {
			t.Fatal(err)
		}
		if !cp.abort {
			end = cp.last + 1
		}
	}
	if end >= 0 {
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: "in", Partition: 0, At: end, LeaderEpoch: -1})
		if _, err := kadm.NewClient(cl).CommitOffsets(ctx, "g", os); err != nil {
			t.Fatal(err)
		}
	}
	return cl
}

var sourcedSpec = Spec{Group: "g", Inputs: []string{"in"}, Outputs: []string{"dlq", "out"}, Progress: "progress",
	TxnTimeout: time.Millisecond, Positioned: []string{"out"}, DeadLetter: "dlq"}

func audited(t *testing.T, cl *kgo.Client, spec Spec) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Run(ctx, cl, spec)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// expectFindings fails unless each finding starts with one of want, in
// order (findings are sorted by check, then place).
func expectFindings(t *testing.T, r *Report, want []string) {
	t.Helper()
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.String())
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Fatalf("findings:\n  %s\nwant, each the start of one:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestAuditChecksEachInputsOutputs(t *testing.T) {
	tests := []struct {
		name   string
		inputs int
		cps    []sourced
		want   []string
	}{{
		name: "one-to-many and dropped inputs with a dead letter pass", inputs: 10,
		cps: []sourced{
			{0, 4, []out{o(0, "a/0"), o(0, "a/1"), o(0, "b/0"), o(1, "a/0"), dead(2), o(3, "a/0"), o(3, "a/1"), o(3, "a/2")}, -1, false},
			{5, 9, each(5, 9), -1, false}},
	}, {
		name: "an aborted checkpoint's outputs leave no trace", inputs: 10,
		cps: []sourced{{0, 4, each(0, 4), -1, false}, {5, 9, cat(each(5, 9), each(5, 9)), -1, true}, {5, 9, each(5, 9), -1, false}},
	}, {
		name: "an input's output duplicated in a later transaction is caught and named", inputs: 10,
		cps: []sourced{{0, 4, each(0, 4), -1, false}, {5, 9, cat(each(5, 9), []out{o(2, "a/0")}), -1, false}},
		want: []string{
			"duplicate in/0@2: its output a/0 is visible 2 times: out/0@2, out/0@11",
			"misplaced in/0@2: its output out/0@11 comes after out/0@10, an output of checkpoint i1/r/2, which committed after checkpoint i1/r/1 consumed in/0@2",
			"source-count out/0: checkpoint i1/r/1 wrote 5 records here, but 6 outputs of inputs it consumed are here: 1 written by another transaction",
			"source-count out/0: checkpoint i1/r/2 wrote 6 records here, 5 of them outputs of inputs it consumed: 1 missing or written by another transaction; every input it consumed has an output",
		},
	}, {
		name: "an input's output duplicated within its transaction is caught and named", inputs: 10,
		cps:  []sourced{{0, 4, cat(each(0, 2), each(2, 4)), -1, false}, {5, 9, each(5, 9), -1, false}},
		want: []string{"duplicate in/0@2: its output a/0 is visible 2 times: out/0@2, out/0@3"},
	}, {
		name: "an output missing between two of an input's is caught and named", inputs: 10,
		cps:  []sourced{{0, 4, []out{o(0, "a/0"), o(3, "a/0"), o(3, "a/2"), o(3, "b/0"), o(3, "b/1")}, -1, false}, {5, 9, each(5, 9), -1, false}},
		want: []string{"missing in/0@3: output a/1 of sink a is missing, though a/2 is there"},
	}, {
		name: "an input's only output lost after it was written is caught and the input named", inputs: 10,
		cps: []sourced{{0, 4, cat(each(0, 1), each(3, 4)), 5, false}, {5, 9, each(5, 9), -1, false}},
		want: []string{
			"output-count out/0: 9 records visible to read_committed, committed checkpoints wrote 10",
			"source-count out/0: checkpoint i1/r/1 wrote 5 records here, 4 of them outputs of inputs it consumed: 1 missing or written by another transaction; 1 of its inputs have no output at all (a step that drops records explains those, a lost write does not): in/0@2",
		},
	}, {
		name: "an output written by the next checkpoint's transaction is caught and named", inputs: 10,
		cps: []sourced{{0, 4, each(0, 3), -1, false}, {5, 9, cat(each(5, 5), each(4, 4), each(6, 9)), -1, false}},
		want: []string{
			"misplaced in/0@4: its output out/0@6 comes after out/0@5, an output of checkpoint i1/r/2, which committed after checkpoint i1/r/1 consumed in/0@4",
			"source-count out/0: checkpoint i1/r/1 wrote 4 records here, but 5 outputs of inputs it consumed are here",
			"source-count out/0: checkpoint i1/r/2 wrote 6 records here, 5 of them outputs of inputs it consumed",
		},
	}, {
		name: "an output naming an input no checkpoint consumed is caught", inputs: 10,
		cps: []sourced{{0, 4, cat(each(0, 4), each(12, 12)), -1, false}, {5, 9, each(5, 9), -1, false}},
		want: []string{
			"source-count out/0: checkpoint i1/r/1 wrote 6 records here, 5 of them outputs of inputs it consumed",
			"unsourced out/0@5: it names input in/0@12, which no committed checkpoint consumed",
		},
	}, {
		name: "an output without position headers is caught", inputs: 10,
		cps: []sourced{{0, 4, cat(each(0, 4), []out{{}}), -1, false}, {5, 9, each(5, 9), -1, false}},
		want: []string{
			"source-count out/0: checkpoint i1/r/1 wrote 6 records here, 5 of them outputs of inputs it consumed",
			"unsourced out/0@5: it has no pipeline.source header",
		},
	}, {
		name: "a dead letter naming an input of another checkpoint is caught", inputs: 10,
		cps: []sourced{{0, 4, each(0, 4), -1, false}, {5, 9, cat(each(5, 9), []out{dead(3)}), -1, false}},
		want: []string{
			"source-count dlq/0: checkpoint i1/r/1 wrote 0 records here, but 1 outputs of inputs it consumed are here",
			"source-count dlq/0: checkpoint i1/r/2 wrote 1 records here, 0 of them outputs of inputs it consumed",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := audited(t, buildSourced(t, tc.inputs, tc.cps), sourcedSpec)
			expectFindings(t, r, tc.want)
			if r.Sourced == 0 {
				t.Fatal("no output was checked by its source")
			}
		})
	}
}

func TestAuditWindowBoundsTheChecks(t *testing.T) {
	// Checkpoint 1 wrote one input's output twice; 2 and 3 are clean.
	early := []sourced{{0, 4, cat(each(0, 1), each(1, 4)), -1, false}, {5, 9, each(5, 9), -1, false}, {10, 14, each(10, 14), -1, false}}
	// Checkpoint 2 lost an input's output in between two of its others.
	middle := []sourced{{0, 4, each(0, 4), -1, false}, {5, 9, cat(each(5, 8), []out{o(9, "a/0"), o(9, "a/2")}), -1, false}, {10, 14, each(10, 14), -1, false}}
	// Checkpoint 1's last output went into checkpoint 2's transaction.
	spilled := []sourced{{0, 4, each(0, 3), -1, false}, {5, 9, each(4, 9), -1, false}, {10, 14, each(10, 14), -1, false}}
	// Inputs 5 and 6 were consumed by no checkpoint.
	gap := []sourced{{0, 4, each(0, 4), -1, false}, {7, 9, each(7, 9), -1, false}, {10, 14, each(10, 14), -1, false}}
	// Checkpoint 1 ran before source positions were turned on.
	unheaded := []sourced{{0, 4, make([]out, 5), -1, false}, {5, 9, each(5, 9), -1, false}, {10, 14, each(10, 14), -1, false}}
	cp := func(i int) Bound { return Bound{Checkpoint: fmt.Sprintf("i1/r/%d", i)} }
	tm := func(i int) Bound { return Bound{Time: at(i - 1)} }
	tests := []struct {
		name        string
		cps         []sourced
		window      Window
		positions   bool
		want        []string
		checkpoints int
		inputs      int64
		notes       int
	}{
		{name: "the whole history catches an early duplicate", cps: early, positions: true, checkpoints: 3, inputs: 15,
			want: []string{"duplicate in/0@1: its output a/0 is visible 2 times"}},
		{name: "from a later checkpoint it is out of the window, and the window's start is no gap", cps: early, positions: true,
			window: Window{From: cp(2)}, checkpoints: 2, inputs: 10},
		{name: "from a later time likewise", cps: early, positions: true, window: Window{From: tm(2)}, checkpoints: 2, inputs: 10},
		{name: "up to the early checkpoint it is caught, the group's offset is not checked", cps: early, positions: true,
			window: Window{To: cp(1)}, checkpoints: 1, inputs: 5, notes: 1,
			want: []string{"duplicate in/0@1: its output a/0 is visible 2 times"}},
		{name: "between two times only the checkpoint committed then is audited", cps: early, positions: true,
			window: Window{From: tm(2), To: tm(2)}, checkpoints: 1, inputs: 5, notes: 1},
		{name: "a missing output within the window is caught and named", cps: middle, positions: true,
			window: Window{From: cp(2), To: cp(2)}, checkpoints: 1, inputs: 5, notes: 1,
			want: []string{"missing in/0@9: output a/1 of sink a is missing"}},
		{name: "a missing output before the window is not", cps: middle, positions: true, window: Window{From: cp(3)}, checkpoints: 1, inputs: 5},
		{name: "a missing output after the window is not", cps: middle, positions: true, window: Window{To: tm(1)}, checkpoints: 1, inputs: 5, notes: 1},
		{name: "an output spilled into the window's first transaction shows there", cps: spilled, positions: true,
			window: Window{From: cp(2)}, checkpoints: 2, inputs: 10,
			want: []string{"source-count out/0: checkpoint i1/r/2 wrote 6 records here, 5 of them outputs of inputs it consumed"}},
		{name: "a gap at the window's start is caught", cps: gap, positions: true, window: Window{From: cp(2)}, checkpoints: 2, inputs: 8,
			want: []string{"gap in/0@5: 2 records between checkpoint i1/r/1 (ends at 4) and i1/r/2 (starts at 7)"}},
		{name: "a gap before the window is not", cps: gap, positions: true, window: Window{From: cp(3)}, checkpoints: 1, inputs: 5},
		{name: "without source positions a window leaves output counts out", cps: early, window: Window{From: cp(2)}, checkpoints: 2, inputs: 10, notes: 1},
		{name: "outputs written before source positions were turned on are caught in the whole history", cps: unheaded, positions: true,
			checkpoints: 3, inputs: 15, want: []string{
				"source-count out/0: checkpoint i1/r/1 wrote 5 records here, 0 of them outputs of inputs it consumed",
				"unsourced out/0@0: it has no pipeline.source header", "unsourced out/0@1", "unsourced out/0@2", "unsourced out/0@3", "unsourced out/0@4",
			}},
		{name: "and left out of a window after it", cps: unheaded, positions: true, window: Window{From: cp(2)}, checkpoints: 2, inputs: 10},
		{name: "without source positions an output spilled into the next transaction goes unseen", cps: spilled, checkpoints: 3, inputs: 15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := sourcedSpec
			spec.Window = tc.window
			if !tc.positions {
				spec.Positioned = nil
			}
			r := audited(t, buildSourced(t, 15, tc.cps), spec)
			expectFindings(t, r, tc.want)
			if r.Checkpoints != tc.checkpoints || r.InputRecords != tc.inputs {
				t.Errorf("audited %d checkpoints and %d inputs, want %d and %d", r.Checkpoints, r.InputRecords, tc.checkpoints, tc.inputs)
			}
			if len(r.Notes) != tc.notes {
				t.Errorf("notes %q, want %d", r.Notes, tc.notes)
			}
			if tc.positions && r.Sourced == 0 {
				t.Error("no output was checked by its source")
			}
		})
	}
}

func TestAuditRefusesWindowsItCannotUse(t *testing.T) {
	cl := buildSourced(t, 10, []sourced{{0, 4, each(0, 4), -1, false}, {5, 9, each(5, 9), -1, false}})
	tests := []struct {
		name   string
		window Window
		end    string
		want   string
	}{
		{"a checkpoint that never committed", Window{From: Bound{Checkpoint: "i1/r/7"}}, "from",
			"from i1/r/7: no committed checkpoint of this pipeline has that id (the first is i1/r/1, the last i1/r/2)"},
		{"checkpoints in the wrong order", Window{From: Bound{Checkpoint: "i1/r/2"}, To: Bound{Checkpoint: "i1/r/1"}}, "from",
			"from i1/r/2: committed after --to i1/r/1"},
		{"times in the wrong order", Window{From: Bound{Time: at(1)}, To: Bound{Time: at(0)}}, "from",
			"from 2026-03-01T12:01:00Z: is after --to 2026-03-01T12:00:00Z"},
		{"a window holding no checkpoint", Window{From: Bound{Time: at(60)}}, "from",
			"from 2026-03-01T13:00:00Z: no committed checkpoint lies in the window from 2026-03-01T13:00:00Z to the last: none of the 2 committed checkpoints is within it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := sourcedSpec
			spec.Window = tc.window
			_, err := Run(context.Background(), cl, spec)
			var we *WindowError
			if !errors.As(err, &we) || we.End != tc.end || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want a WindowError at --%s starting %q", err, tc.end, tc.want)
			}
		})
	}
}

func TestParseBound(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "2026-03-01T12:00:00Z", want: "2026-03-01T12:00:00Z"},
		{in: "2026-03-01T14:00:00.5+02:00", want: "2026-03-01T14:00:00.5+02:00"},
		{in: "i1/9f86d081884c7d65/42", want: "i1/9f86d081884c7d65/42"},
		{in: "pod-0.east/r/1", want: "pod-0.east/r/1"},
		{in: "yesterday", err: `"yesterday" is neither an RFC 3339 time`},
		{in: "2026-03-01", err: "is neither an RFC 3339 time"},
		{in: "2026-03-01T12:00:00", err: "is neither an RFC 3339 time"},
		{in: "i1/r/0", err: "a checkpoint id is a whole number from 1"},
		{in: "i1/42", err: "is neither"},
		{in: "", err: "is neither"},
	}
	for _, tc := range tests {
		b, err := ParseBound(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBound(%q) = %v, %v; want an error with %q", tc.in, b, err, tc.err)
			}
		case err != nil || b.String() != tc.want:
			t.Errorf("ParseBound(%q) = %v, %v; want %s", tc.in, b, err, tc.want)
		}
	}
}
