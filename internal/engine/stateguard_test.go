package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/wire"
)

// Tests of what guards keyed state against being misplaced or misread:
// changelog partitions per task, the fingerprint of the key, local state
// that no longer matches its changelog, and changelog payloads.

// rekeyedInput writes records seq from..to-1 to "in", keyed by user, with
// the region each belongs to, and adds them to want (region → count, sum).
func rekeyedInput(t *testing.T, k *testkit.Kafka, from, to, users, regions int, want map[string][2]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		user, region := "u"+strconv.Itoa(i%users), "r"+strconv.Itoa(i%regions)
		rs = append(rs, &kgo.Record{Topic: "in", Key: []byte(user),
			Value: fmt.Appendf(nil, `{"user":%q,"region":%q,"country":"c%d","seq":%d}`, user, region, i%3, i)})
		if want != nil {
			w := want[region]
			want[region] = [2]int{w[0] + 1, w[1] + i}
		}
	}
	if err := k.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitRekeyedDone waits until group has committed the end of "in" and, on
// the repartition topic, the offset after each partition's last of its n
// records.
func waitRekeyedDone(ctx context.Context, k *testkit.Kafka, group, repart string, n int) error {
	if err := k.WaitCommitted(ctx, group, "in"); err != nil {
		return err
	}
	for {
		recs, err := offsets.ReadToEnd(ctx, k.Client, repart, true)
		if err != nil {
			return err
		}
		next := map[int32]int64{}
		for _, r := range recs {
			next[r.Partition] = r.Offset + 1
		}
		offs, err := k.Admin.FetchOffsets(ctx, group)
		done := len(recs) == n && err == nil
		for p, o := range next {
			if c, ok := offs.Lookup(repart, p); !ok || c.At < o {
				done = false
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group did not consume the repartition topic: %d of %d records there: %w", len(recs), n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

const rekeyedByRegion = `
instance_id: i1
checkpoint: {interval: 100ms, timeout: 10s, max_records: 1500}
transactions: {timeout: 20s}
sources: {in: {topics: [in]}}
steps:
  - name: by_region
    key_by: %s
  - name: per_region
    aggregate:
      fields: {n: count, total: {sum: value.seq}}
      emit: checkpoint
sinks: {out: {topic: out}}
`

// TestRekeyedAggregateWithMorePartitionsIsExactlyOnce re-keys a 3-partition
// input into a 5-partition repartition topic: the aggregate runs in 5
// tasks, so its changelog needs 5 partitions, and tasks 3 and 4 must write
// their state there and read it back. Two runs, each through aborted
// checkpoints; the second restores every task's state from the changelog.
func TestRekeyedAggregateWithMorePartitionsIsExactlyOnce(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n, users, regions = 8000, 50, 20
	body := fmt.Sprintf(rekeyedByRegion, "{key: value.region, partitions: 5}")
	changelog, repart := wire.ChangelogTopic("t", "per_region"), wire.RepartitionTopic("t", "by_region")
	want := map[string][2]int{}
	var aborted [2]atomic.Int64
	for run := range 2 {
		rekeyedInput(t, k, run*n/2, (run+1)*n/2, users, regions, want)
		p := newPipeline(t, k, body, nil, WithBeforeCommit(func(cp Checkpoint) error {
			if cp.ID%3 == 0 && cp.Records > 0 {
				aborted[run].Add(1)
				return errors.New("injected")
			}
			return nil
		}))
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
		werr := waitChangelogPartitions(wctx, k, changelog, 5)
		if werr == nil {
			werr = waitRekeyedDone(wctx, k, "t", repart, (run+1)*n/2)
		}
		wcancel()
		stop()
		if err := <-done; err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		if werr != nil {
			t.Fatalf("run %d: %v", run+1, werr)
		}
		if aborted[run].Load() == 0 {
			t.Fatalf("run %d: no checkpoint was aborted", run+1)
		}
	}
	got := latest(t, k)
	if len(got) != regions {
		t.Fatalf("%d regions in the output, want %d", len(got), regions)
	}
	for region, w := range want {
		if g := got[region]; g["n"] != w[0] || g["total"] != w[1] {
			t.Errorf("region %s: n %v total %v, want %d and %d", region, g["n"], g["total"], w[0], w[1])
		}
	}
	// Tasks 3 and 4 kept state: the test would prove nothing if every
	// region hashed below partition 3.
	perPartition := map[int32]int{}
	for _, r := range k.ReadAll(changelog) {
		if len(r.Key) > 0 && r.Key[0] == 0x01 {
			perPartition[r.Partition]++
		}
	}
	if perPartition[3] == 0 || perPartition[4] == 0 {
		t.Fatalf("state records per changelog partition %v: tasks 3 and 4 kept no state", perPartition)
	}
	t.Logf("%d records re-keyed into 5 partitions over two runs, %d+%d checkpoints aborted on purpose, state records per changelog partition %v",
		n, aborted[0].Load(), aborted[1].Load(), perPartition)
}

// waitChangelogPartitions waits for topic to exist and checks it has want
// partitions.
func waitChangelogPartitions(ctx context.Context, k *testkit.Kafka, topic string, want int) error {
	for {
		details, err := k.Admin.ListTopics(ctx, topic)
		if d, ok := details[topic]; err == nil && ok && d.Err == nil {
			if len(d.Partitions) != want {
				return fmt.Errorf("changelog %s has %d partitions, want %d (one per task of its step)", topic, len(d.Partitions), want)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("changelog %s was not created: %w", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestChangelogWithOtherPartitionsIsAStartupError: a changelog whose
// partitions do not match the step's tasks is refused at start-up.
func TestChangelogWithOtherPartitionsIsAStartupError(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	k.Topic(wire.ChangelogTopic("t", "per_region"), 3)
	p := newPipeline(t, k, fmt.Sprintf(rekeyedByRegion, "{key: value.region, partitions: 5}"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Run(ctx)
	for _, w := range []string{"steps[1]", `"t-per_region-changelog"`, "has 3 partitions", "runs 5 tasks", "t-by_region-repartition", "pipeline state reset"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("start-up error does not say %q: %v", w, err)
		}
	}
}

// TestChangingTheKeyOfAStepIsRefused runs a re-keyed aggregate, then the
// same pipeline keyed by another field: the step names and the aggregate's
// fields are the same, but the state is keyed by region and would be read
// as if keyed by country.
func TestChangingTheKeyOfAStepIsRefused(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 3)
	const n = 600
	rekeyedInput(t, k, 0, n, 10, 7, nil)
	first := newPipeline(t, k, fmt.Sprintf(rekeyedByRegion, "value.region"), nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
	werr := waitRekeyedDone(wctx, k, "t", wire.RepartitionTopic("t", "by_region"), n)
	wcancel()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}

	rekeyedInput(t, k, n, n+30, 10, 7, nil)
	second := newPipeline(t, k, fmt.Sprintf(rekeyedByRegion, "value.country"), nil)
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	err := second.Run(rctx)
	if err == nil {
		t.Fatal("the pipeline ran on state keyed by another key")
	}
	for _, w := range []string{"step per_region", "definition changed", "key_by value.country", "pipeline state reset", "--step per_region"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not say %q: %v", w, err)
		}
	}
}

// warnCounter is a slog handler that counts the records whose message
// starts with prefix.
type warnCounter struct {
	prefix string
	n      *atomic.Int64
}

func (h warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.HasPrefix(r.Message, h.prefix) {
		h.n.Add(1)
	}
	return nil
}
func (h warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnCounter) WithGroup(string) slog.Handler      { return h }

// stateKey is the changelog key of key in value state name.
func stateKey(name, key string) []byte {
	b := append([]byte{0x01, byte(len(name))}, name...)
	b = append(append(b, byte(len(key))), key...)
	return append(b, 0x00)
}

// TestStaleLocalStateIsDiscarded runs an aggregate on pebble, then deletes
// its changelog (and, in one case, writes a shorter history back), as a
// state reset run elsewhere or a recreated topic would: the local store
// has applied offsets the changelog no longer has. The next run must take
// its state from the changelog as it is now, not from the local store.
func TestStaleLocalStateIsDiscarded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rewrite  bool // write the fingerprint and an early value of k0 back
		wantFor0 func(early int) int
	}{
		{"changelog deleted", false, func(int) int { return 1 }},
		{"changelog recreated with a shorter history", true, func(early int) int { return early + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testkit.NewKafka(t)
			k.Topic("in", 1)
			const n, keys = 50, 5
			body := fmt.Sprintf(aggregating, "update") + fmt.Sprintf("state: {backend: pebble, dir: %q}\n", t.TempDir())
			// Two runs, so that the changelog has an early value of
			// each key and a later one.
			for range 2 {
				k.Input("in", n/2, keys, nil)
				testkit.RunUntilCommitted(t, k, newPipeline(t, k, body, nil), "t", "in")
			}

			changelog := wire.ChangelogTopic("t", "per_key")
			old := k.ReadAll(changelog)
			var keep []*kgo.Record
			early := 0
			for _, r := range old {
				if r.Key[0] == 0x00 && len(keep) == 0 {
					keep = append(keep, &kgo.Record{Topic: changelog, Key: r.Key, Value: r.Value})
				}
				if string(r.Key) == string(stateKey("acc", "k0")) && early == 0 {
					acc, err := codec.Acc{}.Decode(r.Value[1:])
					if err != nil {
						t.Fatal(err)
					}
					early = acc["n"].(int)
					keep = append(keep, &kgo.Record{Topic: changelog, Key: r.Key, Value: r.Value})
				}
			}
			if len(keep) != 2 || early == 0 || early >= n/keys {
				t.Fatalf("the changelog of the first run has no fingerprint or no early value of k0 (%d records kept, count %d)", len(keep), early)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := k.Admin.DeleteTopic(ctx, changelog)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.rewrite {
				cr, err := k.Admin.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, changelog)
				if err == nil {
					err = cr.Err
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := k.Client.ProduceSync(ctx, keep...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}

			// One more record per key: its count says what state it
			// was added to.
			k.Input("in", keys, keys, nil)
			var warned atomic.Int64
			second := newPipeline(t, k, body, nil, WithLogger(slog.New(warnCounter{prefix: "local state does not match its changelog", n: &warned})))
			testkit.RunUntilCommitted(t, k, second, "t", "in")
			got := latest(t, k)
			for i := range keys {
				key := "k" + strconv.Itoa(i)
				want := 1
				if i == 0 {
					want = tc.wantFor0(early)
				}
				if got[key]["n"] != want {
					t.Errorf("%s: count %v after the changelog was reset, want %d (the local store counted %d)", key, got[key]["n"], want, n/keys)
				}
			}
			if warned.Load() != 1 {
				t.Fatalf("%d warnings about stale local state, want 1 (one task)", warned.Load())
			}
			t.Logf("the first runs wrote %d changelog records, the new changelog has %d; one warning", len(old), len(keep)*btoi(tc.rewrite))
		})
	}
}

// TestLocalStateOfAnotherDefinition changes an aggregate's definition
// between two runs on pebble. While the changelog still holds the old
// state, the local store's fingerprint refuses the start; once the
// changelog is gone (a state reset run on another instance), the local
// store is stale and discarded, and the step starts from empty state.
func TestLocalStateOfAnotherDefinition(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		t.Run(fmt.Sprintf("changelog deleted %t", deleted), func(t *testing.T) {
			k := testkit.NewKafka(t)
			k.Topic("in", 1)
			const n, keys = 50, 5
			k.Input("in", n, keys, nil)
			pebble := fmt.Sprintf("state: {backend: pebble, dir: %q}\n", t.TempDir())
			testkit.RunUntilCommitted(t, k, newPipeline(t, k, fmt.Sprintf(aggregating, "update")+pebble, nil), "t", "in")
			if deleted {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				resp, err := k.Admin.DeleteTopic(ctx, wire.ChangelogTopic("t", "per_key"))
				cancel()
				if err == nil {
					err = resp.Err
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			k.Input("in", keys, keys, nil)
			changed := strings.Replace(fmt.Sprintf(aggregating, "update"), "total: {sum: value.seq}", "total: {sum: value.seq * 2}", 1) + pebble
			var warned atomic.Int64
			second := newPipeline(t, k, changed, nil, WithLogger(slog.New(warnCounter{prefix: "local state does not match its changelog", n: &warned})))
			if !deleted {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err := second.Run(ctx)
				for _, w := range []string{"step per_key", "task 0", "definition changed", "local state", "pipeline state reset"} {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("error does not say %q: %v", w, err)
					}
				}
				return
			}
			testkit.RunUntilCommitted(t, k, second, "t", "in")
			for key, v := range latest(t, k) {
				if v["n"] != 1 {
					t.Errorf("%s: count %v, want 1: the step must start from empty state", key, v["n"])
				}
			}
			if warned.Load() != 1 {
				t.Fatalf("%d warnings about stale local state, want 1", warned.Load())
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCorruptPayloadIsAStartupErrorNamingWhere appends to an aggregate's
// changelog a record whose key and value header are sound but which the
// operator cannot read: a payload its codec cannot decode, or a state it
// does not have. The next start must fail naming the step, task, changelog
// and offset, rather than fail later on the key's records, or never.
func TestCorruptPayloadIsAStartupErrorNamingWhere(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state string
		value func(valid []byte) []byte
	}{
		{"an accumulator its codec cannot decode", "acc", func([]byte) []byte { return append([]byte{0x10}, "garbage"...) }},
		{"a state the operator does not have", "nope", func(valid []byte) []byte { return valid }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testkit.NewKafka(t)
			k.Topic("in", 1)
			k.Input("in", 50, 5, nil)
			body := fmt.Sprintf(aggregating, "update")
			testkit.RunUntilCommitted(t, k, newPipeline(t, k, body, nil), "t", "in")
			changelog := wire.ChangelogTopic("t", "per_key")
			var valid []byte
			for _, r := range k.ReadAll(changelog) {
				if string(r.Key) == string(stateKey("acc", "k0")) {
					valid = r.Value
				}
			}
			if valid == nil {
				t.Fatal("no accumulator of k0 in the changelog")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res := k.Client.ProduceSync(ctx, &kgo.Record{Topic: changelog, Key: stateKey(tc.state, "k0"), Value: tc.value(valid)})
			if err := res.FirstErr(); err != nil {
				t.Fatal(err)
			}
			off := res[0].Record.Offset
			k.Input("in", 5, 5, nil)
			err := newPipeline(t, k, body, nil).Run(ctx)
			for _, w := range []string{"step per_key", "task 0", changelog, fmt.Sprintf("offset %d", off), fmt.Sprintf("state %q", tc.state)} {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("error does not name %q: %v", w, err)
				}
			}
		})
	}
}

// manualClock is a state clock tests move by hand; tasks and the
// coordinator read it at once.
type manualClock struct{ ns atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// ttlRun runs a pipeline over a 1-partition "in" with a manual clock, and
// feeds it one record at a time.
type ttlRun struct {
	t     *testing.T
	k     *testkit.Kafka
	clock *manualClock
	stop  func()
	done  chan error
}

func startTTLRun(t *testing.T, body string, reg *pipeline.Registry) *ttlRun {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	r := &ttlRun{t: t, k: k, clock: newManualClock(), done: make(chan error, 1)}
	p := newPipeline(t, k, body, reg, WithClock(r.clock))
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-r.done; err != nil {
			t.Error(err)
		}
	})
	return r
}

// send writes one record per key with value, and waits until the pipeline
// committed them.
func (r *ttlRun) send(value string, keys ...string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, key := range keys {
		if err := r.k.Client.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := r.k.WaitCommitted(ctx, "t", "in"); err != nil {
		r.t.Fatal(err)
	}
}

// tombstones waits until the read_committed changelog has a tombstone of
// every key in want (in value state st), and returns the keys of st it
// has tombstones of.
func (r *ttlRun) tombstones(changelog, st string, want ...string) map[string]bool {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		got := map[string]bool{}
		recs, err := offsets.ReadToEnd(ctx, r.k.Client, changelog, true)
		if err != nil {
			r.t.Fatal(err)
		}
		prefix := string(stateKey(st, ""))
		prefix = prefix[:len(prefix)-2] // up to the key's length
		for _, rec := range recs {
			if rec.Value == nil && strings.HasPrefix(string(rec.Key), prefix) {
				got[string(rec.Key[len(prefix)+1:len(rec.Key)-1])] = true
			}
		}
		all := true
		for _, k := range want {
			all = all && got[k]
		}
		if all {
			return got
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("no tombstone of %v in %s (tombstones of %v): the expired state was not removed", want, changelog, got)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestAggregateTTLExpiresIdleKeysByTheInjectedClock: under both update
// policies, a key not updated for longer than the TTL has its state
// removed (a tombstone in the read_committed changelog) and starts afresh,
// while a key updated meanwhile keeps its count. The clock is moved by
// hand; nothing waits for wall-clock time.
func TestAggregateTTLExpiresIdleKeysByTheInjectedClock(t *testing.T) {
	for _, policy := range []string{"on_write", "on_read_and_write"} {
		t.Run(policy, func(t *testing.T) {
			body := strings.Replace(fmt.Sprintf(aggregating, "update"), "      emit: update",
				"      emit: update\n      ttl: 1h\n      ttl_update: "+policy, 1)
			r := startTTLRun(t, body, nil)
			r.send(`{"seq":1}`, "idle", "busy")
			r.clock.advance(40 * time.Minute)
			r.send(`{"seq":2}`, "busy")
			// idle was last written 70 minutes ago, busy 30.
			r.clock.advance(30 * time.Minute)
			gone := r.tombstones(wire.ChangelogTopic("t", "per_key"), "acc", "idle")
			if gone["busy"] {
				t.Fatal("the state of busy, updated within its TTL, was removed")
			}
			r.send(`{"seq":3}`, "idle", "busy")
			got := latest(t, r.k)
			if got["idle"]["n"] != 1 || got["idle"]["first"] != 3 {
				t.Errorf("idle after its TTL: %v; want a fresh count of 1 starting at seq 3", got["idle"])
			}
			if got["busy"]["n"] != 3 || got["busy"]["first"] != 1 {
				t.Errorf("busy: %v; want 3 records since seq 1", got["busy"])
			}
		})
	}
}

// peekDef is a stateful operator that only reads its state on some
// records: {"op":"put"} sets the key's value, {"op":"get"} reads it and
// emits whether it was found.
type peekDef struct{ ttl state.TTLConfig }

func (d peekDef) Outputs() []string   { return nil }
func (d peekDef) Fingerprint() string { return "peek:v1" }
func (d peekDef) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("peek needs a state store")
}
func (d peekDef) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	v, err := state.NewValue[int](st, "v", d.ttl)
	if err != nil {
		return nil, err
	}
	return peekOp{v: v}, nil
}

type peekOp struct{ v *state.Value[int] }

func (o peekOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	x, err := r.Value.Get()
	if err != nil {
		return err
	}
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	switch op, _ := x.(map[string]any)["op"].(string); op {
	case "put":
		return o.v.Put(key, 1)
	case "get":
		_, found, err := o.v.Get(key)
		if err != nil {
			return err
		}
		r.Value.Set(map[string]any{"found": found})
		ctx.Emit(r)
		return nil
	default:
		return fmt.Errorf("op %q", op)
	}
}

// TestReadsRefreshTTLOnlyUnderOnReadAndWrite: a key only read within its
// TTL survives under on_read_and_write and expires under
// on_create_and_write; a key neither read nor written expires under both.
func TestReadsRefreshTTLOnlyUnderOnReadAndWrite(t *testing.T) {
	for _, update := range []state.TTLUpdate{state.OnReadAndWrite, state.OnCreateAndWrite} {
		t.Run(update.String(), func(t *testing.T) {
			reg := ops.NewRegistry()
			if err := reg.Register("peek", func(*pipeline.Spec) (pipeline.Definition, error) {
				return peekDef{ttl: state.TTLConfig{TTL: time.Hour, Update: update}}, nil
			}); err != nil {
				t.Fatal(err)
			}
			body := strings.Replace(passThrough, `steps: [{map: "{k: value.k, seq: value.seq}"}]`, `steps: [{name: seen, peek: {}}]`, 1)
			r := startTTLRun(t, body, reg)
			r.send(`{"op":"put"}`, "read", "untouched")
			r.clock.advance(40 * time.Minute)
			r.send(`{"op":"get"}`, "read")
			r.clock.advance(30 * time.Minute)
			want := []string{"untouched"}
			if update == state.OnCreateAndWrite {
				want = append(want, "read")
			}
			gone := r.tombstones(wire.ChangelogTopic("t", "seen"), "v", want...)
			survives := update == state.OnReadAndWrite
			if gone["read"] == survives {
				t.Fatalf("tombstones %v: the key read 30 minutes ago should survive only under on_read_and_write", gone)
			}
			r.send(`{"op":"get"}`, "read", "untouched")
			out := r.k.ReadAll("out")
			if len(out) != 3 {
				t.Fatalf("%d outputs, want 3 (one per get)", len(out))
			}
			for i, want := range []struct {
				key   string
				found bool
			}{{"read", true}, {"read", survives}, {"untouched", false}} {
				if rec := out[i]; string(rec.Key) != want.key || string(rec.Value) != fmt.Sprintf(`{"found":%t}`, want.found) {
					t.Errorf("output %d: %s %s; want %s found %t", i, rec.Key, rec.Value, want.key, want.found)
				}
			}
		})
	}
}
