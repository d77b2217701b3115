package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/config"
)

// TestAKilledInstanceStallsTheGroupForAtMostItsSessionTimeout runs three
// instances of a pipeline with the default consumer settings, SIGKILLs one
// mid-stream and starts a replacement under a new instance_id, as a
// deployment without stable ids does. The replacement's join begins a
// rebalance that waits for the dead static member until its session times
// out, and until then nobody commits: with the old 45 s default the whole
// group stood still for 45 s (10-12 s at the 10 s the runs that found it
// configured). The default is now 10 s, and the group must be committing
// on every partition again within it (plus 5 s for the rebalance and a
// checkpoint). The test samples the committed offsets every 100 ms and
// reports the longest gap between commits of each partition.
func TestAKilledInstanceStallsTheGroupForAtMostItsSessionTimeout(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions = 6
	records := 100_000
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	var session time.Duration
	cfg := func(instance string) string {
		c := e.config(partitions)
		c.InstanceID = instance
		c.SessionTimeout = 0 // the default is what is tested
		c.TxnTimeout = 12 * time.Second
		path := filepath.Join(e.logDir, instance+".yaml")
		if err := os.WriteFile(path, []byte(c.YAML()), 0o644); err != nil {
			t.Fatal(err)
		}
		loaded, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		session = loaded.Consumer.SessionTimeout
		return path
	}
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: 600, Rate: records / 25})
	procs := map[string]*Process{}
	for _, id := range []string{"a", "b", "c"} {
		procs[id] = e.startPipeline(cfg(id))
	}
	// Every member owns partitions once every partition moves.
	WaitFor(t, time.Minute, "all six partitions to commit", func() (bool, string) {
		_, c, err := e.committed()
		return err == nil && len(c) == partitions, fmt.Sprintf("committed %v (%v)", sorted(c), err)
	})
	time.Sleep(3 * time.Second) // the fault is the kill mid-stream; let the group settle first

	_, before, _ := e.committed()
	procs["b"].Kill()
	killed := time.Now()
	procs["d"] = e.startPipeline(cfg("d"))
	// Sample for the dead member's session timeout and a little more.
	last := map[int32]int64{}
	lastMove := map[int32]time.Time{}
	for p, o := range before {
		last[p], lastMove[p] = o, killed
	}
	gaps := map[int32]time.Duration{}
	var firstCommit time.Duration = -1
	bound := session + 5*time.Second
	for time.Since(killed) < bound+2*time.Second {
		time.Sleep(100 * time.Millisecond)
		_, c, err := e.committed()
		if err != nil {
			continue
		}
		now := time.Now()
		for p, o := range c {
			if o > last[p] {
				gaps[p] = max(gaps[p], now.Sub(lastMove[p]))
				last[p], lastMove[p] = o, now
				if firstCommit < 0 {
					firstCommit = now.Sub(killed)
				}
			}
		}
	}
	for p := range last {
		gaps[p] = max(gaps[p], time.Since(lastMove[p]))
	}
	ps := make([]int, 0, len(gaps))
	for p := range gaps {
		ps = append(ps, int(p))
	}
	sort.Ints(ps)
	var report string
	for _, p := range ps {
		report += fmt.Sprintf(" %d:%v", p, gaps[int32(p)].Round(100*time.Millisecond))
	}
	t.Logf("after the SIGKILL (session timeout %v): first commit %v later; longest gap between commits per partition:%s",
		session, firstCommit.Round(100*time.Millisecond), report)
	if session > 10*time.Second {
		t.Fatalf("the default consumer.session_timeout is %v: a dead member can stop the whole group that long", session)
	}
	for _, p := range ps {
		if gaps[int32(p)] > bound {
			t.Fatalf("partition %d went %v without a commit, longer than the session timeout (%v) and 5 s", p, gaps[int32(p)], session)
		}
	}

	input.Wait(t)
	e.waitInputCommitted(t, e.inputEnd(), procs["a"], procs["c"], procs["d"])
	for _, id := range []string{"a", "c", "d"} {
		procs[id].Term()
	}
	CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
}
