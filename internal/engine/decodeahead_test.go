package engine

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/wire"
)

// withProcs runs the test with n Ps: whether a task decodes ahead depends on
// it, and CI machines differ.
func withProcs(t *testing.T, n int) {
	old := goruntime.GOMAXPROCS(n)
	t.Cleanup(func() { goruntime.GOMAXPROCS(old) })
}

// TestDecodeAheadHandsOnDecodedChunks drives a task's decoder alone and
// checks what reaches the task: chunks of the fetch in order, barriers
// after the records sent before them, and values decoded before they were
// handed on. The check of the last overwrites a record's bytes once its
// chunk has arrived: a value decoded ahead still reads as it was. (Its
// field is a fraction: plain strings and integers are kept as read, and
// decoded from the record's bytes when read.)
func TestDecodeAheadHandsOnDecodedChunks(t *testing.T) {
	withProcs(t, 2)
	o := newOffline(t, "sources: {in: {topics: [in]}}\nsteps: [{filter: \"value.t > 30\"}]\nsinks: {out: {topic: out}}\n", nil)
	tk, _, err := newTask(o.rt, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tk.closeOps()
	if tk.in == tk.queue {
		t.Fatal("a task whose source's JSON values a step reads has no decoder, with 2 Ps")
	}
	go tk.decodeAhead()

	const n = 2*aheadChunk + 40
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := fmt.Sprintf(`{"t":%d.5}`, 100+i)
		if i == 7 {
			v = `{"t":`
		}
		recs[i] = rec("in", 0, int64(i), "k", v)
	}
	barrier := make(chan struct{})
	tk.queue <- work{recs: recs, flush: -1}
	tk.queue <- work{barrier: barrier, flush: -1}
	close(tk.queue)

	next := 0
	for w := range tk.in {
		if w.barrier != nil {
			if next != n {
				t.Fatalf("the barrier came after %d records of the %d sent before it", next, n)
			}
			if w.barrier != barrier {
				t.Fatal("a barrier other than the one sent")
			}
			next = -1
			continue
		}
		if next < 0 {
			t.Fatal("records after the barrier")
		}
		if len(w.recs) > aheadChunk || len(w.pre) != len(w.recs) {
			t.Fatalf("a chunk of %d records with %d decoded; want at most %d, all decoded", len(w.recs), len(w.pre), aheadChunk)
		}
		for i, kr := range w.recs {
			if kr != recs[next] {
				t.Fatalf("chunk record %d is offset %d, want %d", i, kr.Offset, next)
			}
			r := &w.pre[i]
			if r.Source != (pipeline.Position{Topic: "in", Partition: 0, Offset: int64(next)}) {
				t.Fatalf("decoded record %d has position %v", next, r.Source)
			}
			if next == 7 {
				// Not kept: the step that reads it decodes again and
				// gets the error.
				if _, _, err := r.Value.Field("t"); !errors.As(err, new(*pipeline.DecodeError)) {
					t.Fatalf("reading the bad value: %v, want a decode error", err)
				}
				next++
				continue
			}
			copy(kr.Value, strings.Repeat("x", len(kr.Value)))
			x, ok, err := r.Value.Field("t")
			if err != nil || !ok || fmt.Sprint(x) != fmt.Sprint(float64(100+next)+0.5) {
				t.Fatalf("record %d reads t = %v (object %v, %v) once its bytes changed: not decoded ahead", next, x, ok, err)
			}
			next++
		}
	}
	if next != -1 {
		t.Fatalf("the queue closed after %d records and no barrier", next)
	}
}

// TestDecodeAheadOnlyWhereItHelps: no decoder on one P, for a source whose
// values nothing reads, or for one a direct sink copies.
func TestDecodeAheadOnlyWhereItHelps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs int
		body  string
	}{
		{"one P", 1, "sources: {in: {topics: [in]}}\nsteps: [{filter: \"value.t > 30\"}]\nsinks: {out: {topic: out}}\n"},
		{"no value field read", 2, "sources: {in: {topics: [in]}}\nsteps: [{filter: \"key == 'a'\"}]\nsinks: {out: {topic: out}}\n"},
		{"a string source", 2, "sources: {in: {topics: [in], format: string}}\nsteps: [{filter: \"value == 'a'\"}]\nsinks: {out: {topic: out}}\n"},
		{"a direct sink", 2, "sources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withProcs(t, tc.procs)
			o := newOffline(t, tc.body, nil)
			tk, _, err := newTask(o.rt, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer tk.closeOps()
			if tk.in != tk.queue {
				t.Fatal("the task decodes ahead")
			}
		})
	}
}

// TestDecodeAheadThroughTheTask runs a fetch of several chunks through a
// task that decodes ahead: every record comes out once, in order, and a
// value that does not decode goes to the dead-letter topic named by the
// step that read it, at its position.
func TestDecodeAheadThroughTheTask(t *testing.T) {
	withProcs(t, 2)
	o := newOffline(t, "sources: {in: {topics: [in]}}\nsteps: [{map: {value: \"{t: value.t * 2}\"}}]\nsinks: {out: {topic: out}}\ndead_letter: {topic: dlq}\n", nil)
	const n = 3*aheadChunk + 5
	const bad = aheadChunk + 3
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := fmt.Sprintf(`{"t":%d}`, i)
		if i == bad {
			v = `{"t":}`
		}
		recs[i] = rec("in", 2, int64(i), "", v)
	}
	out := o.feed(recs...)
	if tk := o.rt.tasks[2]; tk == nil || tk.in == tk.queue {
		t.Fatal("the task does not decode ahead")
	}
	next := 0
	var dead int
	for _, r := range out {
		if r.Topic == "dlq" {
			dead++
			var step, off string
			for _, h := range r.Headers {
				switch h.Key {
				case wire.HeaderStep:
					step = string(h.Value)
				case wire.HeaderOffset:
					off = string(h.Value)
				}
			}
			if step != "map1" || off != fmt.Sprint(bad) {
				t.Errorf("dead letter of step %q offset %s, want map1 at %d", step, off, bad)
			}
			continue
		}
		if next == bad {
			next++
		}
		if want := fmt.Sprintf(`{"t":%d}`, 2*next); string(r.Value) != want {
			t.Fatalf("output %d is %s, want %s", next, r.Value, want)
		}
		next++
	}
	if next != n || dead != 1 {
		t.Fatalf("%d outputs and %d dead letters, want %d and 1", next, dead, n-1)
	}
}

// TestDecodeChunkIsASmallAllocation: a chunk's records are allocated
// together, and past 32 KB an allocation goes to the heap and has its
// memory cleared afresh each time. A Record that grows must make the chunk
// smaller.
func TestDecodeChunkIsASmallAllocation(t *testing.T) {
	if size := unsafe.Sizeof(pipeline.Record{}) * aheadChunk; size > 32<<10 {
		t.Errorf("a chunk of %d records takes %d bytes, more than 32 KB", aheadChunk, size)
	}
}

// TestGraphForgets: a graph reuses its records' memory only when no step
// keeps a record past Process.
func TestGraphForgets(t *testing.T) {
	for steps, want := range map[string]bool{
		`[]`: true,
		`[{filter: "value.t > 3"}, {map: "{t: value.t}"}, {flat_map: {values: "[value.t]"}}, {name: r, route: [{a: "value.t > 5"}]}]`: true,
		`[{aggregate: {fields: {n: count}}}]`:                         true,
		`[{aggregate: {fields: {n: count}, emit: checkpoint}}]`:       true,
		`[{window: {tumbling: 1m, fields: {n: count}}}]`:              true,
		`[{window: {session: {gap: 1m}, fields: {n: count}}}]`:        true,
		`[{parallel: {map: "{t: value.t}"}}]`:                         false,
		`[{key_by: value.t}, {filter: "value.t > 3"}]`:                false,
		`[{filter: "value.t > 3"}, {dedupe: {id: value.t, ttl: 1h}}]`: false,
	} {
		sinks := "sinks: {out: {topic: out}}\n"
		if strings.Contains(steps, "route") {
			sinks = "sinks: {out: {topic: out, from: r.a}, other: {topic: other, from: r.default}}\n"
		}
		cfg := parseConfig(t, "sources: {in: {topics: [in]}}\nsteps: "+steps+"\n"+sinks)
		g, err := Build(cfg, nil)
		if err != nil {
			t.Fatalf("%s: %v", steps, err)
		}
		if g.forgets != want {
			t.Errorf("%s: forgets %v, want %v", steps, g.forgets, want)
		}
	}
}

// TestDecodeAheadReusesChunks runs fetch after fetch through a task that
// decodes ahead in a graph that keeps no records: the decoder fills the
// chunks the task hands back rather than allocating new ones, and every
// output is still what its input makes, field for field, so no chunk was
// refilled while the task still read it. A fetch is more chunks than can
// be on their way, so that the decoder waits for the task's and refills
// each as soon as it comes back.
func TestDecodeAheadReusesChunks(t *testing.T) {
	withProcs(t, 2)
	o := newOffline(t, "sources: {in: {topics: [in]}}\nsteps: [{filter: \"value.seq % 7 != 3\"}, {map: \"{seq: value.seq, s: value.s, twice: value.seq * 2}\"}]\nsinks: {out: {topic: out}}\n", nil)
	const fetches, n = 6, 3*aheadChunks*aheadChunk + 5
	seq := 0
	for range fetches {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = rec("in", 0, int64(seq), "", fmt.Sprintf(`{"s":"v%d","seq":%d}`, seq*31, seq))
			seq++
		}
		out := o.feed(recs...)
		var want []string
		for _, r := range recs {
			var s int
			fmt.Sscanf(string(r.Value), `{"s":"v%d","seq":%d}`, new(int), &s)
			if s%7 != 3 {
				want = append(want, fmt.Sprintf(`{"s":"v%d","seq":%d,"twice":%d}`, s*31, s, 2*s))
			}
		}
		if len(out) != len(want) {
			t.Fatalf("%d outputs, want %d", len(out), len(want))
		}
		for i, r := range out {
			if string(r.Value) != want[i] {
				t.Fatalf("output %d is %s, want %s", i, r.Value, want[i])
			}
		}
	}
	tk := o.rt.tasks[0]
	if tk == nil || tk.spare == nil {
		t.Fatal("the task does not reuse its chunks")
	}
	chunks := fetches * ((n + aheadChunk - 1) / aheadChunk)
	if tk.made > aheadChunks+2 {
		t.Errorf("the decoder allocated %d chunks' memory for %d chunks, want at most %d", tk.made, chunks, aheadChunks+2)
	}
}
