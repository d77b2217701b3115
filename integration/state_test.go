package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/wire"
)

// countConfig is a count-per-key pipeline: the exactly-once keyed state
// under test.
func countConfig(e *env, partitions int, extra string) string {
	return fmt.Sprintf(`name: %q
brokers: [%q]
instance_id: i1
checkpoint: {interval: 300ms, timeout: 10s}
transactions: {timeout: 30s}
consumer: {session_timeout: 10s}
topics: {partitions: %d}
sources:
  in: {topics: [%q]}
steps:
  - name: per_key
    aggregate:
      fields:
        n: count
        total: {sum: value.seq}
      emit: checkpoint
sinks:
  out: {topic: %q}
%s`, e.group, e.seeds[0], partitions, e.input, e.output, extra)
}

// TestKeyedCountsSurviveRepeatedSIGKILL counts per key over 200,000 records
// and 10,000 keys while the pipeline is SIGKILLed at random points, then
// checks every key's final count and sum against the input.
func TestKeyedCountsSurviveRepeatedSIGKILL(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) { runCountKills(t, backend) })
	}
}

func runCountKills(t *testing.T, backend string) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys, kills = 4, 10_000, 5
	records := 200_000
	if testing.Short() {
		records = 40_000
	}
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	extra := ""
	if backend == "pebble" {
		extra = fmt.Sprintf("state: {backend: pebble, dir: %q}\n", filepath.Join(e.logDir, "state"))
	}
	cfgPath := filepath.Join(e.logDir, "count.yaml")
	if err := os.WriteFile(cfgPath, []byte(countConfig(e, partitions, extra)), 0o644); err != nil {
		t.Fatal(err)
	}
	span := time.Duration(kills)*maxStopDelay + 5*time.Second
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: max(1, int(float64(records)/span.Seconds()))})
	start := time.Now()
	e.killRepeatedly(t, cfgPath, kills, records)
	p := e.startPipeline(cfgPath)
	input.Wait(t)
	end := e.inputEnd()
	e.waitInputCommitted(t, end, p)
	p.Term()
	checkCounts(t, e, records, keys)

	// A clean restart. A task restores its state when its first record
	// arrives, so one more record per key opens every task; each key's
	// count must then be the restored one plus one, exact.
	changelog := wire.ChangelogTopic(e.group, "per_key")
	length := changelogRecords(t, e, changelog)
	produceSeqs(t, e, records, records+keys, keys)
	restartedAt := time.Now()
	p = e.startPipeline(cfgPath)
	e.waitInputCommitted(t, e.inputEnd(), p)
	p.Term()
	replayed, lines := restoredRecords(t, p.LogPath())
	switch backend {
	case "pebble":
		// Every store had applied its changelog before the clean stop:
		// the restart replays at most a tail, never more than one
		// checkpoint's changes (each key once, plus each task's
		// fingerprint record), and far less than the changelog.
		if replayed > int64(keys+partitions) || 10*replayed > length {
			t.Fatalf("the clean restart replayed %d changelog records (%d restore lines) of %d; pebble must replay only the tail, at most %d",
				replayed, lines, length, keys+partitions)
		}
	case "memory":
		if replayed != length {
			t.Fatalf("the clean restart replayed %d changelog records; a memory backend starts empty and replays all %d", replayed, length)
		}
	}
	checkCounts(t, e, records+keys, keys)
	e.audit(cfgPath, records+keys)
	rate := "no restore time"
	if d := restoreTime(t, p.LogPath()); d > 0 {
		rate = fmt.Sprintf("%d ms restoring, %.0f records/s per task", d.Milliseconds(), float64(replayed)/d.Seconds())
	}
	t.Logf("figures: %s backend, %d records, %d keys, %d SIGKILLs, %v, every count and sum exact; the clean restart replayed %d of %d changelog records (%v; %s)",
		backend, records, keys, kills, time.Since(start).Round(time.Millisecond), replayed, length, time.Since(restartedAt).Round(time.Millisecond), rate)
}

// changelogRecords counts the records of a changelog a read_committed
// reader sees: what a restore from the start replays.
func changelogRecords(t *testing.T, e *env, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	recs, err := offsets.ReadToEnd(ctx, e.cl, topic, true)
	if err != nil {
		t.Fatalf("reading %s: %v", topic, err)
	}
	return int64(len(recs))
}

// produceSeqs writes the input records of seqs from to to-1, as the input
// generator would have written them, and waits for their acks.
func produceSeqs(t *testing.T, e *env, from, to, keys int) {
	t.Helper()
	rs := make([]*kgo.Record, 0, to-from)
	for seq := from; seq < to; seq++ {
		rs = append(rs, &kgo.Record{Topic: e.input, Key: []byte(InputKey(seq, keys)), Value: InputValue(seq, keys)})
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("producing seqs %d to %d: %v", from, to, err)
	}
}

var (
	restoredLine     = regexp.MustCompile(`msg="state restored" .*\brecords=(\d+)\b`)
	restoredDuration = regexp.MustCompile(`msg="state restored" .*\bduration=(\S+)`)
)

// restoreTime sums the durations of the restores in a pipeline's log.
func restoreTime(t *testing.T, logPath string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var total time.Duration
	for _, m := range restoredDuration.FindAllSubmatch(b, -1) {
		d, err := time.ParseDuration(string(m[1]))
		if err != nil {
			t.Fatalf("a restore line with duration %q: %v", m[1], err)
		}
		total += d
	}
	return total
}

// restoredRecords sums the records= of the "state restored" lines of a
// pipeline's log: the changelog records its restores replayed. A restore
// that replays nothing logs no line.
func restoredRecords(t *testing.T, logPath string) (records int64, lines int) {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range restoredLine.FindAllSubmatch(b, -1) {
		n, err := strconv.ParseInt(string(m[1]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		records += n
		lines++
	}
	return records, lines
}

// TestKeyedCountsAcrossARebalance runs the count-per-key pipeline on two
// instances: the second joins mid-stream, taking partitions (and their
// state, restored from the changelogs) from the first; then the first is
// SIGKILLed and restarted, taking its partitions back. No key may be
// counted twice or missed across the moves.
func TestKeyedCountsAcrossARebalance(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys = 4, 2_000
	records := 100_000
	if testing.Short() {
		records = 30_000
	}
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	write := func(instance string) string {
		cfg := strings.Replace(countConfig(e, partitions, ""), "instance_id: i1", "instance_id: "+instance, 1)
		cfg = strings.Replace(cfg, "session_timeout: 10s", "session_timeout: 6s", 1)
		cfg = strings.Replace(cfg, "transactions: {timeout: 30s}", "transactions: {timeout: 12s}", 1)
		path := filepath.Join(e.logDir, instance+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg1, cfg2 := write("i1"), write("i2")
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: records / 15})
	p1 := e.startPipeline(cfg1)
	WaitFor(t, time.Minute, "the first instance to commit something", func() (bool, string) {
		c, _, err := e.committed()
		return err == nil && c > 0, fmt.Sprintf("committed %d (%v)", c, err)
	})
	p2 := e.startPipeline(cfg2)
	WaitFor(t, time.Minute, "the second instance to restore state it took over", func() (bool, string) {
		return fileContains(p2.LogPath(), "state restored"), "no restore in i2's log yet"
	})
	if c, _, _ := e.committed(); c >= int64(records) {
		t.Fatalf("the join did not happen mid-stream: %d of %d committed", c, records)
	}
	p1.sleepOrExit(t.Context(), 2*time.Second)
	p1.Kill()
	if c, _, _ := e.committed(); c >= int64(records) {
		t.Fatalf("the kill did not happen mid-stream: %d of %d committed", c, records)
	}
	// Restarted, the first instance takes its partitions back (static
	// membership) and restores their state from the changelogs, which the
	// second instance wrote to meanwhile.
	p1 = e.startPipeline(cfg1)
	WaitFor(t, time.Minute, "the restarted first instance to restore its state", func() (bool, string) {
		return fileContains(p1.LogPath(), "state restored"), "no restore in the restarted i1's log yet"
	})
	input.Wait(t)
	end := e.inputEnd()
	e.waitInputCommitted(t, end, p1, p2)
	p1.Term()
	p2.Term()
	checkCounts(t, e, records, keys)
	e.audit(cfg1, records)
}

// checkCounts reads the count pipeline's output and checks every key's last
// count and sum against the input the generator wrote.
func checkCounts(t *testing.T, e *env, records, keys int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := offsets.ReadToEnd(ctx, e.cl, e.output, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]struct{ N, Total int64 }{}
	for _, r := range out {
		var v struct{ N, Total int64 }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("output %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		got[string(r.Key)] = v
	}
	bad := 0
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		// Key k gets seqs k, k+keys, k+2*keys, ... below records.
		var n, total int64
		for s := k; s < records; s += keys {
			n++
			total += int64(s)
		}
		if g := got[key]; g.N != n || g.Total != total {
			if bad++; bad <= 5 {
				t.Errorf("key %s: count %d sum %d, want %d and %d", key, g.N, g.Total, n, total)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d keys wrong", bad, keys)
	}
	t.Logf("checked %d keys over %d records: every count and sum exact (%d output records read)", keys, records, len(out))
}

// TestRekeyedCountsSurviveRepeatedSIGKILL counts by a field the input is
// not partitioned by: key_by re-keys through the repartition topic, and the
// pipeline is SIGKILLed at random points meanwhile.
func TestRekeyedCountsSurviveRepeatedSIGKILL(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, buckets, kills = 4, 97, 5
	records := 100_000
	if testing.Short() {
		records = 30_000
	}
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	cfg := strings.Replace(countConfig(e, partitions, ""), `  - name: per_key
`, `  - name: by_bucket
    key_by: "string(value.seq % 97)"
  - name: per_key
`, 1)
	cfgPath := filepath.Join(e.logDir, "rekey.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(e2eSeed(t), 0))
	span := time.Duration(kills)*maxStopDelay + 5*time.Second
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: 1000, Rate: max(1, int(float64(records)/span.Seconds()))})
	for i := range kills {
		p := e.startPipeline(cfgPath)
		delay := minStopDelay + time.Duration(rng.Int64N(int64(maxStopDelay-minStopDelay)))
		p.sleepOrExit(t.Context(), delay)
		p.Kill()
		c, _, err := e.committed()
		if err != nil || c >= int64(records) {
			t.Fatalf("SIGKILL %d did not hit a pipeline at work: committed %d (%v)", i+1, c, err)
		}
		t.Logf("SIGKILL %d/%d after %v: %d input records committed", i+1, kills, delay.Round(time.Millisecond), c)
	}
	p := e.startPipeline(cfgPath)
	input.Wait(t)
	end := e.inputEnd()
	repart := e.group + "-by_bucket-repartition"
	WaitFor(t, drainBound, "the input and the repartition topic to be consumed", func() (bool, string) {
		select {
		case <-p.Exited():
			t.Fatalf("the pipeline exited on its own:\n%s", p.Tail(40))
		default:
		}
		_, c, err := e.committed()
		if err != nil || !offsetsReached(c, end) {
			return false, fmt.Sprintf("input committed %v, end %v (%v)", sorted(c), sorted(end), err)
		}
		recs, err := offsets.ReadToEnd(t.Context(), e.cl, repart, true)
		if err != nil {
			return false, err.Error()
		}
		// The pipeline deletes what committed checkpoints consumed of the
		// repartition topic: those records count as there.
		starts, err := e.adm.ListStartOffsets(t.Context(), repart)
		if err != nil {
			return false, err.Error()
		}
		deleted := int64(0)
		starts.Each(func(o kadm.ListedOffset) { deleted += o.Offset })
		if int64(len(recs))+deleted < int64(records) {
			return false, fmt.Sprintf("%d of %d records in the repartition topic (%d offsets deleted)", len(recs), records, deleted)
		}
		next := map[int32]int64{}
		for _, r := range recs {
			next[r.Partition] = r.Offset + 1
		}
		offs, _, err := GroupOffsets(t.Context(), e.adm, e.group, repart)
		if err != nil {
			return false, err.Error()
		}
		for part, o := range next {
			if offs[part] < o {
				return false, fmt.Sprintf("repartition %d: committed %d, last record at %d", part, offs[part], o-1)
			}
		}
		return true, ""
	})
	p.Term()

	out, err := offsets.ReadToEnd(t.Context(), e.cl, e.output, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]struct{ N, Total int64 }{}
	for _, r := range out {
		var v struct{ N, Total int64 }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		got[string(r.Key)] = v
	}
	bad := 0
	for b := range buckets {
		var n, total int64
		for s := b; s < records; s += buckets {
			n++
			total += int64(s)
		}
		if g := got[strconv.Itoa(b)]; g.N != n || g.Total != total {
			if bad++; bad <= 5 {
				t.Errorf("bucket %d: count %d sum %d, want %d and %d", b, g.N, g.Total, n, total)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d buckets wrong", bad, buckets)
	}
	// The audit's inputs are the source and the repartition topic, which
	// holds every record once more, less what the pipeline deleted of it
	// once consumed.
	e.audit(cfgPath, records+presentRecords(t, e, repart))
	t.Logf("figures: %d records re-keyed into %d buckets through 5 SIGKILLs: every count and sum exact", records, buckets)
}

// TestCrashesAroundTheCommitLoseNoState makes the pipeline SIGKILL itself
// (PIPELINE_CRASH_AT) just before a checkpoint's commit and, separately,
// just after the broker confirmed it but before the state store recorded
// it. Restarted, it must restore exactly the committed changelog: every
// count exact.
func TestCrashesAroundTheCommitLoseNoState(t *testing.T) {
	for _, tc := range []struct{ point, backend string }{
		{"after-commit", "pebble"}, {"after-commit", "memory"}, {"before-commit", "pebble"},
	} {
		t.Run(tc.point+" "+tc.backend, func(t *testing.T) {
			requireBinary(t)
			e := newEnv(t)
			const partitions, keys, records = 3, 1_000, 30_000
			CreateTopics(t, e.adm, partitions, e.input, e.output)
			ProduceInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys})
			extra := ""
			if tc.backend == "pebble" {
				extra = fmt.Sprintf("state: {backend: pebble, dir: %q}\n", filepath.Join(e.logDir, "state"))
			}
			cfg := strings.Replace(countConfig(e, partitions, extra), "checkpoint: {interval: 300ms, timeout: 10s}",
				"checkpoint: {interval: 300ms, timeout: 10s, max_records: 2000}", 1)
			cfgPath := filepath.Join(e.logDir, "count.yaml")
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PIPELINE_CRASH_AT", tc.point+":4")
			p := e.startPipeline(cfgPath)
			state := p.Wait(time.Minute)
			if ok, status := killedBySIGKILL(state); !ok || !fileContains(p.LogPath(), "PIPELINE_CRASH_AT: crashing at "+tc.point) {
				t.Fatalf("the crash did not happen at %s: %s\n%s", tc.point, status, p.Tail(20))
			}
			if c, _, _ := e.committed(); c == 0 || c >= records {
				t.Fatalf("the crash did not happen mid-stream: %d of %d committed", c, records)
			}
			os.Unsetenv("PIPELINE_CRASH_AT")
			changelog := wire.ChangelogTopic(e.group, "per_key")
			length := changelogRecords(t, e, changelog)
			p = e.startPipeline(cfgPath)
			end := e.inputEnd()
			WaitFor(t, drainBound, "the group's committed offsets to reach the input end", func() (bool, string) {
				_, c, err := e.committed()
				return err == nil && offsetsReached(c, end), fmt.Sprintf("committed %v, end %v (%v)", sorted(c), sorted(end), err)
			})
			p.Term()
			// After a crash after the commit, the store on disk lags the
			// changelog by that checkpoint: the restart must replay it.
			if tc.backend == "pebble" && tc.point == "after-commit" && !fileContains(p.LogPath(), "state restored") {
				t.Fatalf("the restart replayed no changelog tail:\n%s", p.Tail(20))
			}
			// Pebble replays only a tail: no more than one checkpoint can
			// write (each key once, plus each task's fingerprint record),
			// and less than the changelog. The memory backend replays
			// everything the crashed run committed.
			replayed, lines := restoredRecords(t, p.LogPath())
			switch tc.backend {
			case "pebble":
				if replayed > int64(keys+partitions) || replayed >= length {
					t.Fatalf("the restart replayed %d changelog records (%d restore lines) of %d; pebble must replay at most one checkpoint's, %d",
						replayed, lines, length, keys+partitions)
				}
			case "memory":
				if replayed != length {
					t.Fatalf("the restart replayed %d changelog records; a memory backend starts empty and replays all %d", replayed, length)
				}
			}
			checkCounts(t, e, records, keys)
			e.audit(cfgPath, records)
			t.Logf("%s %s: the restart replayed %d of the %d changelog records the crashed run committed", tc.point, tc.backend, replayed, length)
		})
	}
}
