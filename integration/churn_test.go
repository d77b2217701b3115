package integration

import (
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

	"github.com/twmb/franz-go/pkg/kadm"
)

// churnBuckets is how many keys the re-keyed count of the churn and soak
// pipelines counts under: key_by value.seq % churnBuckets.
const churnBuckets = 97

// churnStep is one change to the group's membership.
type churnStep struct {
	action string // "start", "SIGTERM" or "SIGKILL"
	id     string
	// work is how long the group works once the step has taken effect,
	// before the next one.
	work time.Duration
}

func (s churnStep) String() string { return s.action + " " + s.id }

// churnSchedule is the seeded membership schedule: one instance, then a
// second and a third; one removed cleanly (SIGTERM), another crashed
// (SIGKILL); then both come back, in either order. The seed picks who is
// removed, who crashes, who returns first and the pauses between steps.
func churnSchedule(rng *rand.Rand) []churnStep {
	ids := []string{"i1", "i2", "i3"}
	termed := ids[rng.IntN(3)]
	rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == termed })
	killed := rest[rng.IntN(2)]
	back := []string{termed, killed}
	if rng.IntN(2) == 1 {
		back[0], back[1] = back[1], back[0]
	}
	steps := []churnStep{
		{action: "start", id: "i1"}, {action: "start", id: "i2"}, {action: "start", id: "i3"},
		{action: "SIGTERM", id: termed}, {action: "SIGKILL", id: killed},
		{action: "start", id: back[0]}, {action: "start", id: back[1]},
	}
	for i := range steps {
		steps[i].work = 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
	}
	return steps
}

// churnConfig is state_test's count-per-key pipeline (countConfig) with a
// second, re-keyed count beside it: key_by moves every record through the
// repartition topic to the task owning its bucket, whose state moves with
// the task like the per-key state does.
func churnConfig(t *testing.T, e *env, partitions int, instance, bucketsTopic string) string {
	t.Helper()
	cfg := countConfig(e, partitions, fmt.Sprintf("  buckets: {from: per_bucket, topic: %q}\n", bucketsTopic))
	cfg = mustReplace(t, cfg, "instance_id: i1", "instance_id: "+instance)
	// Short enough that removed instances' partitions move within the
	// test's time; the transaction time-out bounds how long a crashed
	// instance's open transaction holds back readers.
	cfg = mustReplace(t, cfg, "session_timeout: 10s", "session_timeout: 6s")
	cfg = mustReplace(t, cfg, "transactions: {timeout: 30s}", "transactions: {timeout: 12s}")
	cfg = mustReplace(t, cfg, "sinks:\n  out: {topic: ", `  - name: by_bucket
    from: in
    key_by: "string(value.seq % `+strconv.Itoa(churnBuckets)+`)"
  - name: per_bucket
    aggregate:
      fields:
        n: count
        total: {sum: value.seq}
      emit: checkpoint
sinks:
  out: {from: per_key, topic: `)
	path := filepath.Join(e.logDir, instance+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustReplace replaces the one occurrence of old in s, failing the test if
// there is not exactly one: a config built by editing another must not
// silently test something else when that one changes.
func mustReplace(t testing.TB, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("editing a config: %q occurs %d times, want once in:\n%s", old, n, s)
	}
	return strings.Replace(s, old, new, 1)
}

// TestGroupChurnWithKeyedState runs up to three instances of a pipeline
// with keyed state (a count per key, and a count per bucket behind a
// key_by) in one group while input flows, adding and removing them on a
// seeded schedule (churnSchedule). Every step must land with work left,
// the group's assignment must change as the step implies, and each
// instance that gains a partition must restore that task's state from the
// changelogs before going on. At the end every count is exact, no count
// ever goes backwards in the output, and the repartition topic holds every
// input record once.
func TestGroupChurnWithKeyedState(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys = 6, 1_000
	// Input flows at rate; the rest is held back and released in chunks:
	// one after each step has moved partitions, so that every partition
	// has records to process (and so a task to restore) whatever the
	// pipelines' speed, and the tail only once the schedule is over, so
	// every step lands with work left.
	records, rate, first, chunk := 60_000, 2_000, 30_000, 4_000
	if testing.Short() {
		records, rate, first, chunk = 24_000, 1_000, 10_000, 2_000
	}
	bucketsTopic := e.output + "-buckets"
	CreateTopics(t, e.adm, partitions, e.input, e.output, bucketsTopic)
	cfgs := map[string]string{}
	for _, id := range []string{"i1", "i2", "i3"} {
		cfgs[id] = churnConfig(t, e, partitions, id, bucketsTopic)
	}
	rng := rand.New(rand.NewPCG(e2eSeed(t), 0))
	steps := churnSchedule(rng)
	t.Logf("schedule: %v", steps)

	g := newInstanceGroup(t, e, cfgs)
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: rate, Hold: first})
	released := first
	start := time.Now()
	owners := map[string][]int32{}
	moved, restores := 0, 0
	for i, s := range steps {
		marks := map[string]logMark{}
		for _, id := range g.running() {
			marks[id] = markLog(g.live[id])
		}
		var pid int
		switch s.action {
		case "start":
			p := g.start(s.id)
			pid, marks[s.id] = p.Pid(), logMark{path: p.LogPath()}
		case "SIGTERM":
			pid = g.term(s.id) // asserts exit status 0
		case "SIGKILL":
			pid = g.kill(s.id) // asserts the wait status says SIGKILL
		}
		var committed int64
		if i == 0 {
			WaitFor(t, time.Minute, "the first instance to commit something", func() (bool, string) {
				var err error
				committed, _, err = e.committed()
				return err == nil && committed > 0, fmt.Sprintf("committed %d (%v)", committed, err)
			})
		} else if committed = committedNow(t, e); committed == 0 || committed >= int64(records) {
			t.Fatalf("step %d (%v) did not land with work left: %d of %d input records committed", i+1, s, committed, records)
		}
		t.Logf("step %d/%d at %v: %v (pid %d) with %d of %d input records committed", i+1, len(steps),
			time.Since(start).Round(time.Millisecond), s, pid, committed, records)

		// The group settles on the new membership: every partition owned
		// by exactly one live instance.
		var prev map[string][]int32
		prev, owners = owners, awaitAssignment(t, e, g, partitions)
		gained := gainedPartitions(prev, owners)
		if len(gained) == 0 {
			t.Fatalf("step %d (%v) moved no partition: %s before, %s after", i+1, s, ownersString(prev), ownersString(owners))
		}
		// Records on every partition after the move, so every gained task
		// has something to process and so its state to restore.
		released = min(released+chunk, records-chunk)
		input.Release(released)
		if i == 0 {
			// The first instance has nothing to restore yet.
			t.Logf("step 1: assignment %s", ownersString(owners))
		} else {
			restores += awaitRestores(t, g, marks, gained, committed)
			moved += countGained(gained)
			t.Logf("step %d: assignment %s → %s; the %d partitions that moved had their per_key and per_bucket state restored by their new owners (%v)",
				i+1, ownersString(prev), ownersString(owners), countGained(gained), time.Since(start).Round(time.Millisecond))
		}
		if err := g.watch(t.Context(), s.work); err != nil {
			t.Fatal(err)
		}
	}

	input.Release(records)
	input.Wait(t)
	repart := e.group + "-by_bucket-repartition"
	awaitChurnDrain(t, e, g, repart)
	g.termAll()
	t.Logf("drained and stopped after %v", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := settleTransactions(ctx, e, 30*time.Second, e.output, bucketsTopic, repart); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, e, records, keys)
	for _, c := range []struct {
		topic string
		want  map[string]countValue
	}{
		{e.output, expectedCounts(records, func(seq int) string { return InputKey(seq, keys) })},
		{bucketsTopic, expectedCounts(records, func(seq int) string { return strconv.Itoa(seq % churnBuckets) })},
	} {
		problems, n, err := countProblems(ctx, e, c.topic, c.want)
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) > 0 {
			t.Fatalf("%s: %d problems:\n%s", c.topic, len(problems), strings.Join(problems[:min(len(problems), 10)], "\n"))
		}
		t.Logf("%s: %d outputs over %d keys, every key's count rising and exact", c.topic, n, len(c.want))
	}
	if err := checkRepartition(ctx, e, repart, records); err != nil {
		t.Fatal(err)
	}
	// The pipeline's own account of its history, written by every instance
	// that ever ran, against the topics. Its input is the source and the
	// repartition topic: every record is consumed twice, but what the
	// pipeline deleted of the repartition topic once consumed (every 30 s)
	// is gone from the account.
	e.audit(cfgs["i1"], records+presentRecords(t, e, repart))
	t.Logf("figures: %d records, %d keys and %d buckets, %d membership steps (%v), %d partition moves, %d task restores seen in the logs, %v",
		records, keys, churnBuckets, len(steps), steps, moved, restores, time.Since(start).Round(time.Millisecond))
}

// awaitAssignment waits for the group to be Stable with exactly the live
// instances as members, each input partition owned by one of them, and
// returns who owns what.
func awaitAssignment(t *testing.T, e *env, g *instanceGroup, partitions int) map[string][]int32 {
	t.Helper()
	var owners map[string][]int32
	WaitFor(t, 90*time.Second, fmt.Sprintf("the group to assign the input to %v", g.running()), func() (bool, string) {
		if err := g.exited(); err != nil {
			t.Fatal(err)
		}
		state, o, err := groupOwners(t.Context(), e.adm, e.group, e.input)
		if err != nil {
			return false, err.Error()
		}
		owners = o
		status := fmt.Sprintf("group %s, owners %s", state, ownersString(o))
		if state != "Stable" || !slices.Equal(slices.Sorted(maps.Keys(o)), g.running()) {
			return false, status
		}
		seen := map[int32]bool{}
		for _, ps := range o {
			for _, p := range ps {
				if seen[p] {
					return false, status
				}
				seen[p] = true
			}
		}
		return len(seen) == partitions, status
	})
	return owners
}

// gainedPartitions returns, per instance, the partitions it owns after that
// it did not own before.
func gainedPartitions(before, after map[string][]int32) map[string][]int32 {
	gained := map[string][]int32{}
	for id, ps := range after {
		for _, p := range ps {
			if !slices.Contains(before[id], p) {
				gained[id] = append(gained[id], p)
			}
		}
	}
	return gained
}

func countGained(gained map[string][]int32) int {
	n := 0
	for _, ps := range gained {
		n += len(ps)
	}
	return n
}

// awaitRestores waits for every instance to log, since its mark, that it
// restored both counts' state of every task it gained, and for the group
// to commit past committed. It returns the restores seen.
func awaitRestores(t *testing.T, g *instanceGroup, marks map[string]logMark, gained map[string][]int32, committed int64) int {
	t.Helper()
	total := 0
	WaitFor(t, 90*time.Second, fmt.Sprintf("the instances that gained partitions %s to restore their state and go on", ownersString(gained)), func() (bool, string) {
		if err := g.exited(); err != nil {
			t.Fatal(err)
		}
		total = 0
		for id, ps := range gained {
			for _, step := range []string{"per_key", "per_bucket"} {
				got, err := restoredTasks(marks[id], step)
				if err != nil {
					return false, err.Error()
				}
				for _, p := range ps {
					if got[p] == 0 {
						return false, fmt.Sprintf("%s has not restored %s of task %d yet", id, step, p)
					}
					total++
				}
			}
		}
		c, _, err := g.e.committed()
		return err == nil && c > committed, fmt.Sprintf("committed %d, %d at the step (%v)", c, committed, err)
	})
	return total
}

// awaitChurnDrain waits for the group to commit the whole input and
// everything it wrote to the repartition topic.
func awaitChurnDrain(t *testing.T, e *env, g *instanceGroup, repart string) {
	t.Helper()
	end := e.inputEnd()
	WaitFor(t, drainBound, "the input and the repartition topic to be consumed", func() (bool, string) {
		if err := g.exited(); err != nil {
			t.Fatal(err)
		}
		_, c, err := e.committed()
		if err != nil || !offsetsReached(c, end) {
			return false, fmt.Sprintf("input committed %v, end %v (%v)", sorted(c), sorted(end), err)
		}
		// Consumption of the input commits in the transaction that writes
		// its repartitioned records: their end is now final.
		behind, err := repartitionBehind(t.Context(), e, repart)
		if err != nil {
			return false, err.Error()
		}
		return behind == "", behind
	})
}

// repartitionBehind says which repartition partitions the group's offsets
// have not reached the last record of ("" if none).
func repartitionBehind(ctx context.Context, e *env, repart string) (string, error) {
	recs, err := readCommittedRecords(ctx, e, repart)
	if err != nil {
		return "", err
	}
	next := map[int32]int64{}
	for p, rs := range recs {
		if len(rs) > 0 {
			next[p] = rs[len(rs)-1].Offset + 1
		}
	}
	offs, _, err := GroupOffsets(ctx, e.adm, e.group, repart)
	if err != nil {
		return "", err
	}
	var behind []string
	for _, p := range slices.Sorted(maps.Keys(next)) {
		if offs[p] != next[p] {
			behind = append(behind, fmt.Sprintf("repartition %d: committed %d, last record at %d", p, offs[p], next[p]-1))
		}
	}
	return strings.Join(behind, "; "), nil
}

// checkRepartition checks that the repartition topic holds every input
// record exactly once, as read_committed sees it, but those the pipeline
// deleted once committed checkpoints had consumed them: no more than the
// offsets before the partitions' log starts.
func checkRepartition(ctx context.Context, e *env, repart string, records int) error {
	recs, err := readCommittedRecords(ctx, e, repart)
	if err != nil {
		return err
	}
	starts, err := e.adm.ListStartOffsets(ctx, repart)
	if err != nil {
		return err
	}
	var deleted int64
	starts.Each(func(o kadm.ListedOffset) { deleted += o.Offset })
	seen := make([]int, records)
	var bad []string
	n := 0
	for p, rs := range recs {
		n += len(rs)
		for _, r := range rs {
			seq, err := outputSeq(r.Value)
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%d@%d: %v", p, r.Offset, err))
			case seq < 0 || seq >= int64(records):
				bad = append(bad, fmt.Sprintf("%d@%d: seq %d out of range", p, r.Offset, seq))
			default:
				seen[seq]++
			}
		}
	}
	missing := int64(0)
	for seq, n := range seen {
		switch {
		case n == 0:
			missing++
		case n != 1:
			bad = append(bad, fmt.Sprintf("seq %d is in the repartition topic %d times", seq, n))
		}
	}
	if missing > deleted {
		bad = append(bad, fmt.Sprintf("%d seqs are not in the repartition topic, and only %d offsets before its log starts were deleted", missing, deleted))
	}
	if len(bad) > 0 {
		return fmt.Errorf("repartition topic %s (%d records for %d inputs): %d problems:\n%s", repart, n, records, len(bad), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}
	return nil
}

// readCommittedRecords reads topic read_committed up to its last stable
// offset, in offset order per partition, with the checker's reader
// (verify.go): its lz4 decoding spares the race detector the cost that
// makes offsets.ReadToEnd take minutes over the many small batches of a
// repartition topic under go test -race.
// presentRecords counts the committed records an internal topic still
// holds: the pipeline deletes what it consumed of its repartition and
// broadcast topics every 30 s, so the audit can account only for the rest.
func presentRecords(t *testing.T, e *env, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	recs, err := readCommittedRecords(ctx, e, topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rs := range recs {
		n += len(rs)
	}
	return n
}

func readCommittedRecords(ctx context.Context, e *env, topic string) (map[int32][]logRecord, error) {
	ts, err := listPartitions(ctx, e.adm, topic)
	if err != nil {
		return nil, err
	}
	return readTopic(ctx, e.cl, e.adm, ts, ts.lso, readCommitted)
}

// countValue is an output of the count pipelines' aggregate: how many
// records a key has seen, and the sum of their seqs.
type countValue struct{ N, Total int64 }

// expectedCounts is what every key's count must end at once records input
// records have been counted, seq under keyOf(seq).
func expectedCounts(records int, keyOf func(seq int) string) map[string]countValue {
	want := map[string]countValue{}
	for seq := range records {
		k := keyOf(seq)
		v := want[k]
		v.N++
		v.Total += int64(seq)
		want[k] = v
	}
	return want
}

// countProblems reads a count output read_committed and returns what is
// wrong with it: a key whose last value is not wanted, a key output in two
// partitions, a key whose count does not rise from one output to the next
// (state lost, or records counted twice, across a move), a key nobody
// counts. It also returns how many outputs it read.
func countProblems(ctx context.Context, e *env, topic string, want map[string]countValue) ([]string, int, error) {
	recs, err := readCommittedRecords(ctx, e, topic)
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", topic, err)
	}
	var problems []string
	type last struct {
		partition int32
		offset    int64
		v         countValue
	}
	got := map[string]last{}
	n := 0
	for _, p := range slices.Sorted(maps.Keys(recs)) {
		n += len(recs[p])
		for _, r := range recs[p] {
			var v countValue
			if err := json.Unmarshal(r.Value, &v); err != nil {
				problems = append(problems, fmt.Sprintf("%s/%d@%d: %v", topic, p, r.Offset, err))
				continue
			}
			k := string(r.Key)
			if prev, ok := got[k]; ok {
				switch {
				case prev.partition != p:
					problems = append(problems, fmt.Sprintf("key %s output to partitions %d and %d", k, prev.partition, p))
				case v.N <= prev.v.N || v.Total < prev.v.Total:
					problems = append(problems, fmt.Sprintf("key %s went from count %d sum %d (@%d) to count %d sum %d (@%d) in partition %d",
						k, prev.v.N, prev.v.Total, prev.offset, v.N, v.Total, r.Offset, p))
				}
			}
			got[k] = last{p, r.Offset, v}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, w := got[k].v, want[k]; g != w {
			problems = append(problems, fmt.Sprintf("key %s: count %d sum %d, want %d and %d", k, g.N, g.Total, w.N, w.Total))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("key %s is output but no input has it", k))
		}
	}
	return problems, n, nil
}

// settleTransactions waits up to bound for the last stable offset of every
// partition of topics to reach its high watermark: no transaction left
// open on them.
func settleTransactions(ctx context.Context, e *env, bound time.Duration, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var open []string
	err := poll(ctx, func() (bool, error) {
		open = open[:0]
		lso, err1 := e.adm.ListCommittedOffsets(ctx, topics...)
		hwm, err2 := e.adm.ListEndOffsets(ctx, topics...)
		if err1 != nil || err2 != nil {
			open = append(open, fmt.Sprint(err1, err2))
			return false, nil
		}
		hwm.Each(func(h kadm.ListedOffset) {
			if l, ok := lso.Lookup(h.Topic, h.Partition); !ok || l.Offset != h.Offset {
				open = append(open, fmt.Sprintf("%s/%d: last stable offset %d, high watermark %d", h.Topic, h.Partition, l.Offset, h.Offset))
			}
		})
		return len(open) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("transactions still open after %v: %s", bound, strings.Join(open, "; "))
	}
	return nil
}
