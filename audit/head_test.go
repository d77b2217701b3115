package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// headCP is one hand-built checkpoint over the partitions of in: the
// offsets it consumed, first to last, on each partition it names.
type headCP map[int32][2]int64

// headPlan is a hand-built history of a pipeline reading a 3-partition
// topic in, for what lies before each partition's first checkpoint.
type headPlan struct {
	records  int             // records in each partition of in
	retained map[int32]int64 // log start moved here (DeleteRecords) before anything runs
	hand     map[int32]int64 // group offsets committed by hand before the first checkpoint
	cps      []headCP
}

const headPartitions = 3

// buildHead writes the plan's input, moves log starts, commits the hand
// offsets, then writes each checkpoint in one transaction: an output on
// out/0 per record consumed and its progress record. Last it commits the
// group's offset at the last checkpoint's end on each partition a
// checkpoint consumed, as the pipeline does. Checkpoint i (from 1) is
// i1/r/i, committed at(i-1).
func buildHead(t *testing.T, h headPlan) *kgo.Client {
	t.Helper()
	addr := testkit.NewKafka(t, kfake.SeedTopics(headPartitions, "in"), kfake.SeedTopics(1, "out", "progress")).Addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var in []*kgo.Record
	for p := range int32(headPartitions) {
		for i := range h.records {
			in = append(in, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)})
		}
	}
	if err := cl.ProduceSync(ctx, in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	commit := func(at map[int32]int64) {
		t.Helper()
		os := kadm.Offsets{}
		for p, o := range at {
			os.AddOffset("in", p, o, -1)
		}
		resp, err := adm.CommitOffsets(ctx, "g", os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(h.retained) > 0 {
		os := kadm.Offsets{}
		for p, o := range h.retained {
			os.AddOffset("in", p, o, -1)
		}
		resp, err := adm.DeleteRecords(ctx, os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
		starts, err := adm.ListStartOffsets(ctx, "in")
		if err != nil {
			t.Fatal(err)
		}
		for p, o := range h.retained {
			if s, _ := starts.Lookup("in", p); s.Offset != o {
				t.Fatalf("in/%d starts at %d after deleting the records before %d", p, s.Offset, o)
			}
		}
	}
	if len(h.hand) > 0 {
		commit(h.hand)
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("pipeline-i1"), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	end := map[int32]int64{}
	for i, cp := range h.cps {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		p := wire.Progress{Version: 1, Pipeline: "p", Group: "g", Instance: "i1", Run: "r", Checkpoint: wire.CheckpointID(i + 1),
			Time: at(i).UnixMilli()}
		var outs []*kgo.Record
		for _, part := range slices.Sorted(maps.Keys(cp)) {
			r := cp[part]
			p.Inputs = append(p.Inputs, wire.ProgressInput{Topic: "in", Partition: part, First: r[0], Last: r[1]})
			for off := r[0]; off <= r[1]; off++ {
				outs = append(outs, &kgo.Record{Value: fmt.Appendf(nil, "in/%d@%d", part, off)})
			}
			end[part] = r[1] + 1
		}
		p.Outputs = []wire.ProgressOutput{{Topic: "out", Partition: 0, Records: int64(len(outs))}}
		b, _ := json.Marshal(p)
		outs = append(outs, &kgo.Record{Topic: "progress", Value: b})
		if err := txn.ProduceSync(ctx, outs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	if len(end) > 0 {
		commit(end)
	}
	// The offsets the audit must see: the pipeline's where a checkpoint
	// consumed, the hand-committed ones elsewhere.
	want := maps.Clone(h.hand)
	if want == nil {
		want = map[int32]int64{}
	}
	maps.Copy(want, end)
	got, err := adm.FetchOffsets(ctx, "g")
	if err != nil && len(want) > 0 {
		t.Fatal(err)
	}
	for p, o := range want {
		if c, ok := got.Lookup("in", p); !ok || c.At != o {
			t.Fatalf("the group's offset on in/%d is %d (listed: %v), want %d", p, c.At, ok, o)
		}
	}
	return cl
}

var headSpec = Spec{Group: "g", Inputs: []string{"in"}, Outputs: []string{"out"}, Progress: "progress", TxnTimeout: time.Millisecond}

// each3 is a checkpoint consuming first..last on each of the 3 partitions.
func each3(first, last int64) headCP {
	return headCP{0: {first, last}, 1: {first, last}, 2: {first, last}}
}

func all3(o int64) map[int32]int64 { return map[int32]int64{0: o, 1: o, 2: o} }

func TestAuditChecksTheHeadOfEachInputPartition(t *testing.T) {
	const skipped = "and were consumed by no committed checkpoint: the group's offset was past them (moved by `pipeline offsets reset` or by hand)"
	tests := []struct {
		name   string
		h      headPlan
		latest bool
		window Window
		want   []string // each the start of one finding, in order, or a part of it after "…"
		notes  []string // each a part of one note, in order
		inputs int64
	}{{
		// 3,000 records over 3 partitions, the group's offsets committed
		// by hand at 50 on each before the first run: 150 never processed.
		name: "offsets committed by hand ahead before the first run are caught, named, with the count",
		h:    headPlan{records: 1000, hand: all3(50), cps: []headCP{each3(50, 499), each3(500, 999)}},
		want: []string{
			"gap in/0@0: 50 records (offsets 0..49, from the log start) lie before checkpoint i1/r/1 (starts at 50), the first on this partition, " + skipped,
			"gap in/1@0: 50 records (offsets 0..49, from the log start) lie before checkpoint i1/r/1",
			"gap in/2@0: 50 records (offsets 0..49, from the log start) lie before checkpoint i1/r/1 (starts at 50)…audit --from a checkpoint committed after i1/r/1",
		},
		inputs: 2850,
	}, {
		name:   "records removed by retention before the first checkpoint are no loss",
		h:      headPlan{records: 20, retained: map[int32]int64{0: 5, 1: 12, 2: 20}, cps: []headCP{{0: {5, 11}, 1: {12, 15}}, {0: {12, 19}, 1: {16, 19}}}},
		inputs: 23,
	}, {
		name: "what lies between the log start and an offset committed ahead of it is caught",
		h:    headPlan{records: 20, retained: map[int32]int64{0: 5, 1: 12}, hand: map[int32]int64{0: 8, 1: 12, 2: 1}, cps: []headCP{{0: {8, 19}, 1: {12, 19}, 2: {1, 19}}}},
		want: []string{
			"gap in/0@5: 3 records (offsets 5..7, from the log start) lie before checkpoint i1/r/1 (starts at 8)",
			"gap in/2@0: 1 records (offsets 0..0, from the log start)",
		},
		inputs: 39,
	}, {
		name:   "records after the last checkpoint's end are lag, not loss",
		h:      headPlan{records: 20, cps: []headCP{each3(0, 4), {0: {5, 9}, 1: {5, 6}}}},
		inputs: 22,
	}, {
		name: "a partition with a committed offset that no checkpoint consumed is caught",
		h:    headPlan{records: 20, hand: map[int32]int64{2: 7}, cps: []headCP{{0: {0, 9}, 1: {0, 9}}}},
		want: []string{
			"offsets in/2: the group's committed offset is 7, but no committed checkpoint consumed this partition: the 7 records before it (offsets 0..6, from the log start) are skipped (the offset moved by `pipeline offsets reset` or by hand",
		},
		inputs: 20,
	}, {
		name: "with no checkpoint at all too",
		h:    headPlan{records: 20, hand: all3(3)},
		want: []string{"offsets in/0: the group's committed offset is 3, but", "offsets in/1: the group's committed offset is 3, but", "offsets in/2: the group's committed offset is 3, but"},
	}, {
		name:   "an offset at the log start of a partition no checkpoint consumed skips nothing",
		h:      headPlan{records: 20, retained: map[int32]int64{2: 4}, hand: map[int32]int64{1: 0, 2: 4}, cps: []headCP{{0: {0, 9}}}},
		inputs: 10,
	}, {
		name:   "an offset past records removed by retention skips only those still there",
		h:      headPlan{records: 20, retained: map[int32]int64{2: 4}, hand: map[int32]int64{2: 9}, cps: []headCP{{0: {0, 9}}}},
		want:   []string{"offsets in/2: the group's committed offset is 9, but no committed checkpoint consumed this partition: the 5 records before it (offsets 4..8, from the log start)"},
		inputs: 10,
	}, {
		name:   "starting from latest, the heads are not checked and a note says so",
		h:      headPlan{records: 20, hand: map[int32]int64{0: 12, 1: 15, 2: 9}, cps: []headCP{{0: {12, 19}, 1: {15, 19}}}},
		latest: true,
		notes:  []string{"consumer.start_from is latest"},
		inputs: 13,
	}, {
		name:   "a window starting after a partition's first checkpoint leaves its head out",
		h:      headPlan{records: 20, hand: all3(5), cps: []headCP{{0: {5, 9}, 1: {5, 9}}, {0: {10, 14}, 1: {10, 14}, 2: {5, 14}}}},
		window: Window{From: Bound{Checkpoint: "i1/r/2"}},
		// Partition 2's first checkpoint is i1/r/2, in the window.
		want:   []string{"gap in/2@0: 5 records (offsets 0..4, from the log start) lie before checkpoint i1/r/2 (starts at 5)"},
		notes:  []string{"output counts were not checked"},
		inputs: 20,
	}, {
		name:   "a window from after every partition's first checkpoint finds nothing",
		h:      headPlan{records: 20, hand: all3(5), cps: []headCP{each3(5, 9), each3(10, 14)}},
		window: Window{From: Bound{Time: at(1)}},
		notes:  []string{"output counts were not checked"},
		inputs: 15,
	}, {
		name:   "a window ending at the first checkpoint checks the heads",
		h:      headPlan{records: 20, hand: all3(5), cps: []headCP{each3(5, 9), each3(10, 14)}},
		window: Window{To: Bound{Checkpoint: "i1/r/1"}},
		want:   []string{"gap in/0@0: 5 records", "gap in/1@0: 5 records", "gap in/2@0: 5 records"},
		notes:  []string{"output counts were not checked", "the group's offsets were checked on 0 of 3 input partitions"},
		inputs: 15,
	}, {
		name:   "a window after the first checkpoint leaves out a partition no checkpoint consumed, with a note",
		h:      headPlan{records: 20, hand: map[int32]int64{2: 7}, cps: []headCP{{0: {0, 9}, 1: {0, 9}}, {0: {10, 19}, 1: {10, 19}}}},
		window: Window{From: Bound{Checkpoint: "i1/r/2"}},
		notes:  []string{"output counts were not checked", "the group's offsets on 1 input partitions that no committed checkpoint consumed were not checked"},
		inputs: 20,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := headSpec
			spec.StartLatest, spec.Window = tc.latest, tc.window
			r := audited(t, buildHead(t, tc.h), spec)
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.String())
			}
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(tc.want); i++ {
				start, part, _ := strings.Cut(tc.want[i], "…")
				ok = strings.HasPrefix(got[i], start) && strings.Contains(got[i], part)
			}
			if !ok {
				t.Errorf("findings:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			ok = len(r.Notes) == len(tc.notes)
			for i := 0; ok && i < len(tc.notes); i++ {
				ok = strings.Contains(r.Notes[i], tc.notes[i])
			}
			if !ok {
				t.Errorf("notes %q, want %q", r.Notes, tc.notes)
			}
			if r.InputRecords != tc.inputs {
				t.Errorf("%d input records accounted for, want %d", r.InputRecords, tc.inputs)
			}
		})
	}
}
