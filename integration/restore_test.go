package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/wire"
)

// TestALongRestoreLetsTheOtherPartitionsCommit restarts a keyed count
// (memory backend, so every task restores its whole changelog) with the
// fetches of partition 0's changelog held 7 s each by a proxy: that
// restore outlasts transactions.timeout (2 s) three times over. It used to
// run inside the checkpoint that first read the partition, with the other
// partitions' outputs in the open transaction: the broker aborted it, the
// client was rebuilt, the state was restored again from the start, and
// after three such fences the pipeline exited as a "zombie" with no twin in
// sight. Now the other partitions must commit while partition 0 restores,
// nothing may abort, and every count must be exact.
func TestALongRestoreLetsTheOtherPartitionsCommit(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys, records = 3, 20_000, 40_000
	const txnTimeout, hold = 2 * time.Second, 7 * time.Second
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	cfg := countConfig(e, partitions, "")
	cfg = strings.Replace(cfg, "checkpoint: {interval: 300ms, timeout: 10s}", "checkpoint: {interval: 300ms, timeout: 1500ms}", 1)
	cfg = strings.Replace(cfg, "transactions: {timeout: 30s}", fmt.Sprintf("transactions: {timeout: %s}", txnTimeout), 1)
	direct := filepath.Join(e.logDir, "count.yaml")
	if err := os.WriteFile(direct, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	produceSeqs(t, e, 0, records, keys)
	p := e.startPipeline(direct)
	e.waitInputCommitted(t, e.inputEnd(), p)
	p.Term()

	px := startProxy(t, Seeds(e.broker))
	changelog := wire.ChangelogTopic(e.group, "per_key")
	td, err := e.adm.ListTopics(t.Context(), changelog)
	if err != nil || td[changelog].Err != nil {
		t.Fatalf("describing %s: %v %v", changelog, err, td[changelog].Err)
	}
	id := td[changelog].ID
	px.DelayFetches(func(topic string, tid [16]byte, partition int32) bool {
		return (topic == changelog || tid == id) && partition == 0
	}, hold)
	proxied := filepath.Join(e.logDir, "count-proxied.yaml")
	if err := os.WriteFile(proxied, []byte(strings.Replace(cfg, fmt.Sprintf("brokers: [%q]", e.seeds[0]), fmt.Sprintf("brokers: [%q]", px.Addrs()[0]), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// One more record per key opens every task.
	produceSeqs(t, e, records, records+keys, keys)
	end := e.inputEnd()
	start := time.Now()
	p = e.startPipeline(proxied)
	restored := `"task restored; its records flow again" task=0`
	WaitFor(t, time.Minute, "partitions 1 and 2 to commit everything", func() (bool, string) {
		select {
		case <-p.Exited():
			t.Fatalf("the pipeline exited:\n%s", p.Tail(30))
		default:
		}
		_, c, err := e.committed()
		return err == nil && c[1] == end[1] && c[2] == end[2], fmt.Sprintf("committed %v of %v (%v)", sorted(c), sorted(end), err)
	})
	othersAt := time.Since(start)
	if fileContains(p.LogPath(), `msg="state restored" step=per_key task=0 `) {
		t.Fatalf("partitions 1 and 2 committed only once partition 0's restore was over (%v):\n%s", othersAt, p.Tail(30))
	}
	e.waitInputCommitted(t, end, p)
	drained := time.Since(start)
	p.Term()
	checkCounts(t, e, records+keys, keys)

	if px.Delayed() == 0 {
		t.Fatal("no changelog fetch was held back: the restore was not slowed")
	}
	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(restored) + ` took=(\S+)`).FindSubmatch(log)
	if m == nil {
		t.Fatalf("no line says task 0 was restored:\n%s", p.Tail(30))
	}
	took, err := time.ParseDuration(string(m[1]))
	if err != nil || took < 3*txnTimeout {
		t.Fatalf("task 0's restore took %s (%v), not the three times transactions.timeout the test needs", m[1], err)
	}
	for _, bad := range []string{"checkpoint aborted", "checkpoint failed", "fenced", "rebuilding"} {
		if strings.Contains(string(log), bad) {
			t.Fatalf("the pipeline's log says %q: a restore held a transaction open\n%s", bad, p.Tail(30))
		}
	}
	t.Logf("figures: %d keys over %d partitions; task 0's restore took %v (%d fetches held %v, transactions.timeout %v); partitions 1 and 2 committed after %v, everything after %v; 0 aborted",
		keys, partitions, took, px.Delayed(), hold, txnTimeout, othersAt.Round(time.Millisecond), drained.Round(time.Millisecond))
}
