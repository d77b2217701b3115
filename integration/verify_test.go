package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The checker's own tests build histories by hand on an in-process kfake
// cluster, one per test: a checker that passes bad runs makes every
// end-to-end test worthless, so each invariant is shown to catch its fault,
// to name it, and to name nothing else.

func TestCheckerJudgesHandBuiltHistories(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(f *fixture)
		want  []Invariant
		check func(t *testing.T, f *fixture, r *Report)
	}{
		{
			name: "a clean history passes",
			build: func(f *fixture) {
				f.commitInChunks(f.outputs(), 20)
				f.commitGroup(nil)
			},
			check: func(t *testing.T, f *fixture, r *Report) {
				if r.OutputRecords != len(f.input) || r.UncommittedRecords != len(f.input) || r.AbortedRecords != 0 {
					t.Errorf("counts: %s", r.Summary())
				}
			},
		},
		{
			name: "a duplicated output is caught as a duplicate",
			build: func(f *fixture) {
				outs := f.outputs()
				f.commitInChunks(slices.Insert(outs, 12, outs[7]), 20)
				f.commitGroup(nil)
			},
			want:  []Invariant{NoDuplicates},
			check: wantExample(NoDuplicates, 7),
		},
		{
			name: "a lost output is caught as a gap",
			build: func(f *fixture) {
				f.commitInChunks(slices.Delete(f.outputs(), 9, 10), 20)
				f.commitGroup(nil)
			},
			want:  []Invariant{NoLoss},
			check: wantExample(NoLoss, 9),
		},
		{
			name: "outputs of a key out of order are caught",
			build: func(f *fixture) {
				outs := f.outputs()
				// seq 2 and seq 7 share key k2 (and so a partition).
				outs[2], outs[7] = outs[7], outs[2]
				f.commitInChunks(outs, 20)
				f.commitGroup(nil)
			},
			want:  []Invariant{PerKeyOrder},
			check: wantExample(PerKeyOrder, 2),
		},
		{
			name: "a key spread over two partitions is caught",
			build: func(f *fixture) {
				outs := f.outputs()
				outs[3].partition = (outs[3].partition + 1) % f.partitions
				f.commitInChunks(outs, 20)
				f.commitGroup(nil)
			},
			want:  []Invariant{PerKeyOrder},
			check: wantExample(PerKeyOrder, 3),
		},
		{
			name: "a wrong derived value is caught",
			build: func(f *fixture) {
				outs := f.outputs()
				outs[4].value = []byte(`{"k":"k4","seq":4,"doubled":9}`)
				f.commitInChunks(outs, 20)
				f.commitGroup(nil)
			},
			want:  []Invariant{DerivedValues},
			check: wantExample(DerivedValues, 4),
		},
		{
			name: "an output under another key than its input is caught",
			build: func(f *fixture) {
				outs := f.outputs()
				outs[6].key = "stranger"
				f.commitInChunks(outs, 20)
				f.commitGroup(nil)
			},
			want:  []Invariant{DerivedValues},
			check: wantExample(DerivedValues, 6),
		},
		{
			name: "an aborted transaction stays invisible and is counted only under read_uncommitted",
			build: func(f *fixture) {
				outs := f.outputs()
				f.transact(kgo.TryCommit, outs[:30])
				// A crashed attempt at seqs 25..29 and a wrong value: all aborted.
				redo := slices.Clone(outs[25:30])
				redo[0].value = []byte(`{"k":"k0","seq":25,"doubled":-1}`)
				f.transact(kgo.TryAbort, redo)
				f.transact(kgo.TryCommit, outs[30:])
				f.commitGroup(nil)
			},
			check: func(t *testing.T, f *fixture, r *Report) {
				if r.AbortedRecords != 5 || r.AbortMarkers == 0 {
					t.Errorf("want 5 aborted records behind abort markers: %s", r.Summary())
				}
				if r.OutputRecords != len(f.input) || r.UncommittedRecords != len(f.input)+5 {
					t.Errorf("want %d records read_committed and %d more read_uncommitted: %s", len(f.input), 5, r.Summary())
				}
			},
		},
		{
			name: "a transaction left open is caught as hanging",
			build: func(f *fixture) {
				outs := f.outputs()
				f.commitInChunks(outs, 20)
				f.commitGroup(nil)
				f.leaveOpen(outs[:3])
			},
			want: []Invariant{NoHangingTxn},
			check: func(t *testing.T, f *fixture, r *Report) {
				if r.OpenRecords != 3 || r.OutputRecords != len(f.input) {
					t.Errorf("want 3 open records and every output committed: %s", r.Summary())
				}
			},
		},
		{
			name: "committed offsets behind the input end are caught",
			build: func(f *fixture) {
				f.commitInChunks(f.outputs(), 20)
				f.commitGroup(map[int32]int64{f.input[0].Partition: -2})
			},
			want: []Invariant{OffsetsMatch},
		},
		{
			name: "committed offsets ahead of the input end are caught",
			build: func(f *fixture) {
				f.commitInChunks(f.outputs(), 20)
				f.commitGroup(map[int32]int64{f.input[0].Partition: +1})
			},
			want: []Invariant{OffsetsMatch},
		},
		{
			name: "a group that never committed is caught",
			build: func(f *fixture) {
				f.commitInChunks(f.outputs(), 20)
			},
			want: []Invariant{OffsetsMatch},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 3, 60, 5)
			tc.build(f)
			r, err := Verify(t.Context(), f.seeds, CheckSpec{Input: f.in, Output: f.out, Group: f.group, InputRecords: 60, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("checker could not judge: %v", err)
			}
			t.Logf("report:\n%s", r)
			if got := r.Violated(); !slices.Equal(got, tc.want) {
				t.Fatalf("violated %v, want %v\n%s", got, tc.want, r)
			}
			if tc.check != nil {
				tc.check(t, f, r)
			}
		})
	}
}

// wantExample checks that an invariant's examples name the record with seq.
func wantExample(inv Invariant, seq int64) func(t *testing.T, f *fixture, r *Report) {
	return func(t *testing.T, f *fixture, r *Report) {
		t.Helper()
		for _, v := range r.Violations[inv].Examples {
			if v.Seq == seq {
				return
			}
		}
		t.Errorf("%s: no example names seq %d: %v", inv, seq, r.Violations[inv].Examples)
	}
}

// A correct broker never shows an aborted record to read_committed, so
// these histories are written out by hand: they show that the checker reads
// the transaction markers itself instead of trusting the broker's filter.
func TestCheckerHoldsReadCommittedToTheMarkers(t *testing.T) {
	value := func(seq int) []byte { return fmt.Appendf(nil, `{"k":"k%d","seq":%d,"doubled":%d}`, seq, seq, 2*seq) }
	marker := func(typ kmsg.ControlRecordKeyType) []byte {
		return (&kmsg.ControlRecordKey{Type: typ}).AppendTo(nil)
	}
	// A first attempt by producer 7 aborted; producer 8 redid it and committed.
	log := []logRecord{
		{Offset: 0, Key: []byte("k0"), Value: value(0), ProducerID: 7, Transactional: true},
		{Offset: 1, Key: marker(kmsg.ControlRecordKeyTypeAbort), ProducerID: 7, Transactional: true, Control: true},
		{Offset: 2, Key: []byte("k0"), Value: value(0), ProducerID: 8, Transactional: true},
		{Offset: 3, Key: []byte("k1"), Value: value(1), ProducerID: 8, Transactional: true},
		{Offset: 4, Key: marker(kmsg.ControlRecordKeyTypeCommit), ProducerID: 8, Transactional: true, Control: true},
	}
	visible := func(offsets ...int64) []logRecord {
		var out []logRecord
		for _, r := range log {
			if slices.Contains(offsets, r.Offset) {
				out = append(out, r)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		committed []logRecord
		want      []Invariant
	}{
		{"read_committed agreeing with the markers passes", visible(2, 3), nil},
		{"an aborted record shown to read_committed is caught", visible(0, 2, 3), []Invariant{NoDuplicates, NoAbortedVisible}},
		{"a committed record hidden from read_committed is caught", visible(2), []Invariant{NoLoss, NoAbortedVisible}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &history{
				spec: CheckSpec{Input: "in", Output: "out", Group: "g"},
				input: []InputRecord{
					{Partition: 0, Offset: 0, Key: "k0", Seq: 0},
					{Partition: 0, Offset: 1, Key: "k1", Seq: 1},
				},
				inEnd:        map[int32]int64{0: 2},
				committed:    map[int32][]logRecord{0: tc.committed},
				uncommitted:  map[int32][]logRecord{0: log},
				outHWM:       map[int32]int64{0: 5},
				outLSO:       map[int32]int64{0: 5},
				groupOffsets: map[int32]int64{0: 2},
			}
			r := h.check()
			t.Logf("report:\n%s", r)
			if got := r.Violated(); !slices.Equal(got, tc.want) {
				t.Fatalf("violated %v, want %v\n%s", got, tc.want, r)
			}
			if r.AbortedRecords != 1 || r.CommitMarkers != 1 || r.AbortMarkers != 1 {
				t.Errorf("want 1 aborted record, 1 commit and 1 abort marker: %s", r.Summary())
			}
		})
	}
}

// TestCheckerLeavesOutOnlyTheSkippedInput mixes three records that are not
// generator input into the input, as poison records are: the checker must
// refuse to judge unless CheckSpec.Skip leaves them out, and an output of a
// record it leaves out is a violation.
func TestCheckerLeavesOutOnlyTheSkippedInput(t *testing.T) {
	poison := map[string]bool{}
	for i := range 3 {
		poison[fmt.Sprintf(`{"k":"k%d","seq":`, i)] = true // cut short
	}
	seq5 := string(InputValue(5, 5))
	for _, tc := range []struct {
		name    string
		skip    func(value []byte) bool
		records int
		want    []Invariant
		wantErr string
	}{
		{name: "poison left out passes", skip: func(v []byte) bool { return poison[string(v)] }, records: 60},
		{name: "poison not left out is no generator input", records: 60, wantErr: "is not generator input"},
		{name: "a good record left out has an output of no input", records: 59,
			skip: func(v []byte) bool { return poison[string(v)] || string(v) == seq5 }, want: []Invariant{DerivedValues}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 3, 60, 5)
			var recs []*kgo.Record
			for v := range poison {
				recs = append(recs, &kgo.Record{Topic: f.in, Partition: int32(len(recs)) % f.partitions, Value: []byte(v)})
			}
			f.produceInput(recs...)
			f.commitInChunks(f.outputs(), 20)
			f.commitGroup(nil)
			r, err := Verify(t.Context(), f.seeds, CheckSpec{Input: f.in, Output: f.out, Group: f.group, InputRecords: tc.records, Skip: tc.skip, Timeout: 30 * time.Second})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("checker error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("checker could not judge: %v", err)
			}
			t.Logf("report:\n%s", r)
			if got := r.Violated(); !slices.Equal(got, tc.want) {
				t.Fatalf("violated %v, want %v\n%s", got, tc.want, r)
			}
			if wantSkipped := 3 + 60 - tc.records; r.SkippedInput != wantSkipped || r.InputRecords != tc.records {
				t.Errorf("want %d input records judged and %d left out: %s", tc.records, wantSkipped, r.Summary())
			}
			if tc.want != nil {
				wantExample(DerivedValues, 5)(t, f, r)
			}
		})
	}
}

// TestCheckerJudgesTransactionalInputByItsCommittedRecords ends partition 0
// of the input with an aborted transaction of two generator-like records:
// its records and abort marker lie between the last committed record and
// the high watermark. With CheckSpec.TransactionalInput the group's offset
// may be anywhere in that stretch and nowhere else; without it, only the
// high watermark will do. An input transaction still open is refused.
func TestCheckerJudgesTransactionalInputByItsCommittedRecords(t *testing.T) {
	const beyond = 3 // two aborted records and their abort marker
	for _, tc := range []struct {
		name          string
		transactional bool
		skew          int64 // on partition 0's high watermark
		leaveOpen     bool
		want          []Invariant
		wantErr       string
	}{
		{name: "the high watermark passes", transactional: true},
		{name: "the offset after the last committed record passes", transactional: true, skew: -beyond},
		{name: "an offset inside the aborted transaction passes", transactional: true, skew: -1},
		{name: "behind the last committed record is caught", transactional: true, skew: -beyond - 1, want: []Invariant{OffsetsMatch}},
		{name: "beyond the high watermark is caught", transactional: true, skew: +1, want: []Invariant{OffsetsMatch}},
		{name: "without the flag only the high watermark passes", skew: -beyond, want: []Invariant{OffsetsMatch}},
		{name: "an input transaction left open is refused", transactional: true, leaveOpen: true, wantErr: "has a transaction open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 3, 60, 5)
			f.commitInChunks(f.outputs(), 20)
			var aborted []*kgo.Record
			for _, seq := range []int{1000, 1001} {
				aborted = append(aborted, &kgo.Record{Topic: f.in, Partition: 0, Key: []byte(InputKey(seq, 5)), Value: InputValue(seq, 5)})
			}
			cl := f.producer()
			defer cl.Close()
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(t.Context(), aborted...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(t.Context(), kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			if tc.leaveOpen {
				open := f.producer()
				t.Cleanup(open.Close)
				if err := open.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				rec := &kgo.Record{Topic: f.in, Partition: 1, Value: InputValue(2000, 5)}
				if err := open.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			f.commitGroup(map[int32]int64{0: tc.skew})
			r, err := Verify(t.Context(), f.seeds, CheckSpec{Input: f.in, Output: f.out, Group: f.group, InputRecords: 60,
				TransactionalInput: tc.transactional, Timeout: 30 * time.Second})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("checker error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("checker could not judge: %v", err)
			}
			t.Logf("report:\n%s", r)
			if got := r.Violated(); !slices.Equal(got, tc.want) {
				t.Fatalf("violated %v, want %v\n%s", got, tc.want, r)
			}
			if tc.want != nil {
				if ex := r.Violations[OffsetsMatch].Examples; len(ex) != 1 || ex[0].Partition != 0 {
					t.Errorf("want partition 0 named, and only it: %v", ex)
				}
			}
		})
	}
}

// fixture is an in-process kfake cluster holding generator input, onto
// which a test writes the outputs and offsets a pipeline might have.
type fixture struct {
	t          testing.TB
	seeds      []string
	adm        *kadm.Client
	in, out    string
	group      string
	partitions int32
	input      []InputRecord // in seq order
	producers  int
}

func newFixture(t testing.TB, partitions int32, records, keys int) *fixture {
	t.Helper()
	f := &fixture{t: t, in: "in", out: "out", group: "pipeline", partitions: partitions}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, f.in, f.out))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f.seeds = c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f.adm = kadm.NewClient(cl)

	ProduceInput(t, f.seeds, InputSpec{Topic: f.in, Records: records, Keys: keys})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ts, err := listPartitions(ctx, f.adm, f.in)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := readTopic(ctx, cl, f.adm, ts, ts.lso, readCommitted)
	if err != nil {
		t.Fatal(err)
	}
	if f.input, err = parseInput(recs); err != nil {
		t.Fatal(err)
	}
	return f
}

type outRec struct {
	partition int32
	key       string
	value     []byte
}

// outputs are what a correct pipeline makes of the input: the same key in
// the same partition, seq order kept, doubled = 2*seq.
func (f *fixture) outputs() []outRec {
	outs := make([]outRec, len(f.input))
	for i, in := range f.input {
		outs[i] = outRec{in.Partition, in.Key, fmt.Appendf(nil, `{"k":%q,"seq":%d,"doubled":%d}`, in.Key, in.Seq, 2*in.Seq)}
	}
	return outs
}

// producer is a transactional producer that places records by hand.
func (f *fixture) producer() *kgo.Client {
	f.t.Helper()
	f.producers++
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(f.seeds...),
		kgo.TransactionalID(fmt.Sprintf("%s-fixture-%d", f.group, f.producers)),
		kgo.TransactionTimeout(time.Minute),
		kgo.DefaultProduceTopic(f.out),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// The pipeline's default codec, so the checker's lz4 path is read.
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
	)
	if err != nil {
		f.t.Fatal(err)
	}
	return cl
}

func (f *fixture) produceInTxn(cl *kgo.Client, outs []outRec) {
	f.t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		f.t.Fatal(err)
	}
	recs := make([]*kgo.Record, len(outs))
	for i, o := range outs {
		recs[i] = &kgo.Record{Partition: o.partition, Key: []byte(o.key), Value: o.value}
	}
	if err := cl.ProduceSync(f.t.Context(), recs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
}

// produceInput appends recs to the input, idempotently and outside any
// transaction.
func (f *fixture) produceInput(recs ...*kgo.Record) {
	f.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		f.t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(f.t.Context(), recs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
}

// transact writes outs in one transaction and ends it with end.
func (f *fixture) transact(end kgo.TransactionEndTry, outs []outRec) {
	f.t.Helper()
	cl := f.producer()
	defer cl.Close()
	f.produceInTxn(cl, outs)
	if err := cl.EndTransaction(f.t.Context(), end); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) commitInChunks(outs []outRec, n int) {
	f.t.Helper()
	for chunk := range slices.Chunk(outs, n) {
		f.transact(kgo.TryCommit, chunk)
	}
}

// leaveOpen writes outs in a transaction that is never ended, as a
// producer that died mid-transaction leaves it until the broker times it
// out.
func (f *fixture) leaveOpen(outs []outRec) {
	f.t.Helper()
	cl := f.producer()
	f.t.Cleanup(cl.Close)
	f.produceInTxn(cl, outs)
}

// commitGroup commits the input's end offsets for the group, shifted per
// partition by skew.
func (f *fixture) commitGroup(skew map[int32]int64) {
	f.t.Helper()
	ctx := f.t.Context()
	ends, err := f.adm.ListEndOffsets(ctx, f.in)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		f.t.Fatal(err)
	}
	var offsets kadm.Offsets
	ends.Each(func(o kadm.ListedOffset) {
		offsets.AddOffset(f.in, o.Partition, o.Offset+skew[o.Partition], -1)
	})
	if err := f.adm.CommitAllOffsets(ctx, f.group, offsets); err != nil {
		f.t.Fatal(err)
	}
}
