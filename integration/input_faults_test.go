package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/wire"
)

// TestPoisonRecordsGoToTheDeadLetterTopicOnce mixes poison records into the
// input, undecodable ones and ones whose seq the map step cannot multiply,
// and SIGKILLs the pipeline three times while they flow, so that checkpoints
// holding dead letters are aborted and replayed. Every good record must be
// in the output exactly once and every poison record in the dead-letter
// topic exactly once (read_committed), with the error and its source
// position in headers; nothing else may be there.
func TestPoisonRecordsGoToTheDeadLetterTopicOnce(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys, kills = 3, 300, 3
	const span = 20 * time.Second
	good, poison := 20_000, 400
	if testing.Short() {
		good, poison = 6_000, 120
	}
	total := good + poison
	dlq := e.group + "-dlq"
	CreateTopics(t, e.adm, partitions, e.input, e.output, dlq)
	cfgPath := filepath.Join(e.logDir, "poison.yaml")
	cfg := e.config(partitions).YAML() + fmt.Sprintf("dead_letter: {topic: %q}\n", dlq)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(e2eSeed(t), 0))

	start := time.Now()
	// Good records are seqs 0..good-1, poison ones good..total-1; both
	// flow for the whole span, interleaved in every partition.
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: good, Keys: keys, Rate: int(float64(good) / span.Seconds())})
	pspec := PoisonSpec{Topic: e.input, First: good, Count: poison, Keys: keys, Span: span}
	bad := StartPoison(t, e.seeds, pspec)
	last := killAtWork(t, e, cfgPath, kills, total, rng)

	p := e.startPipeline(cfgPath)
	input.Wait(t)
	bad.Wait(t)
	end := e.inputEnd()
	e.waitInputCommitted(t, end, p)
	p.Term()
	drained := time.Since(start)

	poisonSeq := pspec.Values()
	r := CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: good,
		Skip: func(v []byte) bool { _, ok := poisonSeq[string(v)]; return ok }})

	dead := checkDeadLetters(t, e, dlq, poisonSeq, "map1", func(seq int) string {
		return map[PoisonKind]string{Undecodable: "decoding", BadField: "invalid operation"}[PoisonOf(seq)]
	})
	a := e.audit(cfgPath, total)
	t.Logf("figures: %d good and %d poison records (%d undecodable, %d bad field), %d SIGKILLs (last at %d committed), drained in %v; output %d read_committed, %d aborted-transaction records; dead letters %d read_committed, %d in aborted transactions (%d commit, %d abort markers); audit %d checkpoints, %d input, %d output records",
		good, poison, (poison+1)/2, poison/2, kills, last, drained.Round(time.Millisecond), r.OutputRecords, r.AbortedRecords,
		dead.OutputRecords, dead.AbortedRecords, dead.CommitMarkers, dead.AbortMarkers, a.Checkpoints, a.InputRecords, a.OutputRecords)
}

// killAtWork starts the pipeline and SIGKILLs it kills times, each time
// once it has committed something since it started, after a random moment
// more: every kill hits a pipeline at work, with an open transaction. Each
// kill must come before the group has committed all total input records.
// It returns the records committed at the last kill.
func killAtWork(t *testing.T, e *env, cfgPath string, kills int, total int, rng *rand.Rand) int64 {
	t.Helper()
	var last int64
	for i := range kills {
		p := e.startPipeline(cfgPath)
		WaitFor(t, time.Minute, "the restarted pipeline to commit", func() (bool, string) {
			select {
			case <-p.Exited():
				t.Fatalf("the pipeline exited on its own:\n%s", p.Tail(40))
			default:
			}
			c, _, err := e.committed()
			return err == nil && c > last, fmt.Sprintf("committed %d, %d before it started (%v)", c, last, err)
		})
		delay := time.Duration(rng.Int64N(int64(time.Second)))
		p.sleepOrExit(t.Context(), delay)
		p.Kill()
		c, _, err := e.committed()
		if err != nil {
			t.Fatalf("after SIGKILL %d: fetching committed offsets: %v", i+1, err)
		}
		if c >= int64(total) {
			t.Fatalf("SIGKILL %d came after the pipeline had committed all %d records: it did not happen mid-stream", i+1, total)
		}
		t.Logf("SIGKILL %d/%d, %v after its first commit: %d of %d committed (+%d)", i+1, kills, delay.Round(time.Millisecond), c, total, c-last)
		last = c
	}
	return last
}

// checkDeadLetters checks that the dead-letter topic holds, read_committed,
// each poison input record exactly once, as it was read (key and value),
// with the step that failed, the error (which must say wantErr(seq)) and its
// source position in headers, and nothing else. It returns the topic's transaction outcomes.
func checkDeadLetters(t *testing.T, e *env, dlq string, poisonSeq map[string]int, step string, wantErr func(seq int) string) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	in, err := offsets.ReadToEnd(ctx, e.cl, e.input, true)
	if err != nil {
		t.Fatal(err)
	}
	type pos struct {
		partition int32
		offset    int64
	}
	inputAt := make(map[pos]*kgo.Record, len(in))
	wantAt := make(map[pos]int) // poison input positions → seq
	for _, r := range in {
		inputAt[pos{r.Partition, r.Offset}] = r
		if seq, ok := poisonSeq[string(r.Value)]; ok {
			wantAt[pos{r.Partition, r.Offset}] = seq
		}
	}
	if len(wantAt) != len(poisonSeq) {
		t.Fatalf("the input holds %d of the %d poison records produced", len(wantAt), len(poisonSeq))
	}
	dead, err := offsets.ReadToEnd(ctx, e.cl, dlq, true)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	seen := make(map[pos]string) // where each dead letter was found
	for _, d := range dead {
		here := fmt.Sprintf("%s/%d@%d", d.Topic, d.Partition, d.Offset)
		h := make(map[string]string)
		for _, hd := range d.Headers {
			h[hd.Key] = string(hd.Value)
		}
		part, err1 := strconv.ParseInt(h[wire.HeaderPartition], 10, 32)
		off, err2 := strconv.ParseInt(h[wire.HeaderOffset], 10, 64)
		if h[wire.HeaderTopic] != e.input || err1 != nil || err2 != nil {
			problem("%s: source headers %s=%q %s=%q %s=%q do not name an input record", here,
				wire.HeaderTopic, h[wire.HeaderTopic], wire.HeaderPartition, h[wire.HeaderPartition], wire.HeaderOffset, h[wire.HeaderOffset])
			continue
		}
		at := pos{int32(part), off}
		src := fmt.Sprintf("%s/%d@%d", e.input, at.partition, at.offset)
		seq, isPoison := wantAt[at]
		orig := inputAt[at]
		switch {
		case orig == nil:
			problem("%s: names %s, which holds no record", here, src)
			continue
		case !isPoison:
			problem("%s: a good record (%s, %s) was dead-lettered: %s=%q", here, src, orig.Value, wire.HeaderError, h[wire.HeaderError])
			continue
		case seen[at] != "":
			problem("%s: poison seq %d (%s) again, first at %s", here, seq, src, seen[at])
			continue
		}
		seen[at] = here
		if string(d.Key) != string(orig.Key) || string(d.Value) != string(orig.Value) {
			problem("%s: key %q value %q, the input %s has %q %q", here, d.Key, d.Value, src, orig.Key, orig.Value)
		}
		if want, errText := wantErr(seq), h[wire.HeaderError]; !strings.Contains(errText, want) {
			problem("%s: poison seq %d: %s=%q, want it to say %q", here, seq, wire.HeaderError, errText, want)
		}
		if got := h[wire.HeaderStep]; got != step {
			problem("%s: %s=%q, want %s", here, wire.HeaderStep, got, step)
		}
	}
	for _, at := range slices.SortedFunc(maps.Keys(wantAt), func(a, b pos) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
	}) {
		if seen[at] == "" {
			problem("poison seq %d at %s/%d@%d has no dead letter", wantAt[at], e.input, at.partition, at.offset)
		}
	}
	if len(problems) > 0 || len(dead) != len(wantAt) {
		t.Fatalf("dead-letter topic %s: %d records read_committed for %d poison inputs:\n%s", dlq, len(dead), len(wantAt), strings.Join(problems, "\n"))
	}

	outcomes, err := TxnOutcomes(ctx, e.seeds, dlq)
	if err != nil {
		t.Fatal(err)
	}
	if !outcomes.OK() {
		t.Fatalf("dead-letter topic %s:\n%s", dlq, outcomes)
	}
	outcomes.OutputRecords = len(dead)
	t.Logf("dead letters: each of the %d poison records once in %s, read_committed, with its source position and error (%d more in aborted transactions)",
		len(dead), dlq, outcomes.AbortedRecords)
	return outcomes
}

// TestAbortedInputTransactionsNeverReachTheOutput feeds the pipeline input
// written by two transactional producers side by side, each aborting some
// of its batches (on other batches than the other), so that aborted and
// committed records interleave in every partition; the pipeline is
// SIGKILLed and restarted while they write. Nothing aborted may reach the
// output, even in the pipeline's own aborted transactions; every committed
// record must be there exactly once.
func TestAbortedInputTransactionsNeverReachTheOutput(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions = 3
	spec := TxnInputSpec{
		Topic: e.input, Writers: 2, Batches: 60, PerBatch: 50, Keys: 100, Span: 15 * time.Second,
		// Writer 0 aborts batches 0, 3, 6, ...; writer 1 batches 2, 5,
		// 8, ... and its last, which ends the input (see TxnInputSpec):
		// aborted records after the last committed one too.
		Abort: func(w, b int) bool { return (w+b)%3 == 0 },
	}
	if testing.Short() {
		spec.Batches, spec.Span = 30, 8*time.Second
	}
	if !spec.Abort(spec.Writers-1, spec.Batches-1) {
		t.Fatal("the batch that ends the input must be an aborted one")
	}
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	cfgPath := e.config(partitions).Write(t, e.logDir)
	rng := rand.New(rand.NewPCG(e2eSeed(t), 0))

	start := time.Now()
	input := StartTxnInput(t, e.seeds, spec)
	planned := spec.Writers * spec.Batches * spec.PerBatch
	// The kill comes once the pipeline has committed records and passed
	// over at least one aborted batch, and before the writers are done.
	p := e.startPipeline(cfgPath)
	WaitFor(t, time.Minute, "the pipeline to commit, with an aborted batch already in the input", func() (bool, string) {
		c, _, err := e.committed()
		_, aborted := input.Ended()
		return err == nil && c > 0 && aborted > 0, fmt.Sprintf("committed %d, %d input records aborted (%v)", c, aborted, err)
	})
	delay := time.Duration(rng.Int64N(int64(time.Second)))
	p.sleepOrExit(t.Context(), delay)
	p.Kill()
	select {
	case <-input.Done():
		t.Fatal("the SIGKILL came after the input writers had finished: it did not happen mid-stream")
	default:
	}
	c, _, err := e.committed()
	if err != nil {
		t.Fatal(err)
	}
	committedIn, abortedIn := input.Ended()
	t.Logf("SIGKILL after %v: %d records committed by the group; input so far %d committed, %d aborted, of %d planned",
		time.Since(start).Round(time.Millisecond), c, committedIn, abortedIn, planned)

	p = e.startPipeline(cfgPath)
	committed, aborted, commitTxns, abortTxns := input.Wait(t)
	if len(aborted) == 0 || len(committed) == 0 || len(committed)+len(aborted) != planned {
		t.Fatalf("the writers committed %d and aborted %d records, of %d planned", len(committed), len(aborted), planned)
	}
	// The end to reach is the offset after each partition's last committed
	// record: the markers and aborted records beyond it are no input.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	visible, err := offsets.ReadToEnd(ctx, e.cl, e.input, true)
	if err != nil {
		t.Fatal(err)
	}
	end := map[int32]int64{}
	for _, r := range visible {
		end[r.Partition] = max(end[r.Partition], r.Offset+1)
	}
	// The aborted last batch lies beyond every committed record: its
	// records and abort markers, and the commit markers before them.
	var beyond int64
	for part, hwm := range e.inputEnd() {
		beyond += hwm - end[part]
	}
	if beyond < int64(spec.PerBatch+1) {
		t.Fatalf("%d offsets lie beyond the last committed input records (%v): the aborted last batch of %d records does not end the input", beyond, sorted(end), spec.PerBatch)
	}
	WaitFor(t, drainBound, "the group's committed offsets to pass the last committed input record", func() (bool, string) {
		select {
		case <-p.Exited():
			t.Fatalf("the pipeline exited on its own while draining:\n%s", p.Tail(40))
		default:
		}
		_, c, err := e.committed()
		if err != nil {
			return false, err.Error()
		}
		for part, o := range end {
			if c[part] < o {
				return false, fmt.Sprintf("committed %v, last committed input records end at %v", sorted(c), sorted(end))
			}
		}
		return true, ""
	})
	p.Term()
	drained := time.Since(start)

	// The aborted batches are in the input: read_uncommitted sees them,
	// under abort markers.
	in, err := TxnOutcomes(ctx, e.seeds, e.input)
	if err != nil {
		t.Fatal(err)
	}
	if !in.OK() || in.AbortedRecords != len(aborted) || in.UncommittedRecords != planned || in.AbortMarkers < abortTxns || in.CommitMarkers < commitTxns {
		t.Fatalf("input %s: want %d records in %d aborted transactions and %d in %d committed ones; read_uncommitted shows %d records, %d aborted (%d abort, %d commit markers)\n%s",
			e.input, len(aborted), abortTxns, len(committed), commitTxns, in.UncommittedRecords, in.AbortedRecords, in.AbortMarkers, in.CommitMarkers, in)
	}

	r := CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: len(committed), TransactionalInput: true})

	// Not even the pipeline's own aborted transactions may hold an aborted
	// input: it must never have been read.
	all, err := offsets.ReadToEnd(ctx, e.cl, e.output, false)
	if err != nil {
		t.Fatal(err)
	}
	leaked := 0
	for _, o := range all {
		var v struct{ Seq int }
		if err := json.Unmarshal(o.Value, &v); err != nil {
			t.Fatalf("output %s/%d@%d: %v", o.Topic, o.Partition, o.Offset, err)
		}
		if aborted[v.Seq] {
			if leaked++; leaked <= 5 {
				t.Errorf("output %s/%d@%d holds seq %d, from an aborted input transaction", o.Topic, o.Partition, o.Offset, v.Seq)
			}
		}
	}
	if leaked > 0 {
		t.Fatalf("%d outputs (read_uncommitted) come from aborted input", leaked)
	}

	a := e.audit(cfgPath, len(committed))
	_, groupAt, _ := e.committed()
	t.Logf("figures: %d input records in %d committed and %d aborted transactions (%d aborted records, %d abort markers; %d offsets after the last committed records), 1 SIGKILL, drained in %v; output %d read_committed, %d read_uncommitted searched, none from aborted input; group offsets %v, input high watermarks %v; audit %d checkpoints, %d input, %d output records",
		planned, commitTxns, abortTxns, len(aborted), in.AbortMarkers, beyond, drained.Round(time.Millisecond), r.OutputRecords, len(all),
		sorted(groupAt), sorted(e.inputEnd()), a.Checkpoints, a.InputRecords, a.OutputRecords)
}
