package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestRebalancesMidStream runs two instances of one pipeline in one group
// while input flows: the second joins mid-stream (partitions move away from
// the first), then the first is SIGKILLed (its partitions move to the
// second once its session times out). Nothing may be lost or doubled across
// either move.
func TestRebalancesMidStream(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions = 4
	records := 120_000
	if testing.Short() {
		records = 30_000
	}
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	write := func(instance string) string {
		c := e.config(partitions)
		c.InstanceID = instance
		c.SessionTimeout = 6 * time.Second
		// The killed instance never comes back, so nothing fences its open
		// transaction: the broker aborts it at this time-out. Until then it
		// holds back read_committed readers of the partitions it wrote.
		c.TxnTimeout = 12 * time.Second
		path := filepath.Join(e.logDir, instance+".yaml")
		if err := os.WriteFile(path, []byte(c.YAML()), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg1, cfg2 := write("i1"), write("i2")

	start := time.Now()
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: 500, Rate: records / 15})
	p1 := e.startPipeline(cfg1)
	WaitFor(t, time.Minute, "the first instance to commit something", func() (bool, string) {
		c, _, err := e.committed()
		return err == nil && c > 0, fmt.Sprintf("committed %d (%v)", c, err)
	})

	p2 := e.startPipeline(cfg2)
	// The join must take partitions from the first instance while it works.
	WaitFor(t, time.Minute, "the first instance to give partitions up to the second", func() (bool, string) {
		return fileContains(p1.LogPath(), "tasks closed after their partitions were revoked"), "no revocation in i1's log yet"
	})
	committed, _, err := e.committed()
	if err != nil || committed >= int64(records) {
		t.Fatalf("the join did not happen mid-stream: committed %d of %d (%v)", committed, records, err)
	}
	t.Logf("i2 joined after %v; %d of %d committed", time.Since(start).Round(time.Millisecond), committed, records)

	// Let both work a little, then kill the first: its partitions stay
	// with the dead static member until its session times out, then move.
	p1.sleepOrExit(t.Context(), 2*time.Second)
	p1.Kill()
	committed, _, err = e.committed()
	if err != nil || committed >= int64(records) {
		t.Fatalf("the kill did not happen mid-stream: committed %d of %d (%v)", committed, records, err)
	}
	t.Logf("i1 SIGKILLed after %v; %d of %d committed", time.Since(start).Round(time.Millisecond), committed, records)

	input.Wait(t)
	end := e.inputEnd()
	e.waitInputCommitted(t, end, p2)
	p2.Term()
	// The killed instance's last transaction is still open; it holds no
	// offsets the survivor needed (those were stable), only outputs the
	// survivor wrote again. The broker aborts it at its time-out.
	killedAt := time.Now()
	WaitFor(t, time.Minute, "the killed instance's open transaction to be aborted by its time-out", func() (bool, string) {
		lso, err1 := e.adm.ListCommittedOffsets(t.Context(), e.output)
		hwm, err2 := e.adm.ListEndOffsets(t.Context(), e.output)
		if err1 != nil || err2 != nil {
			return false, fmt.Sprint(err1, err2)
		}
		open := 0
		lso.Each(func(o kadm.ListedOffset) {
			if h, ok := hwm.Lookup(o.Topic, o.Partition); ok && h.Offset != o.Offset {
				open++
			}
		})
		return open == 0, fmt.Sprintf("%d output partitions with an open transaction", open)
	})
	t.Logf("open transactions of the killed instance gone %v after the drain (transaction time-out 12s)", time.Since(killedAt).Round(time.Millisecond))
	r := CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
	e.audit(cfg2, records)
	t.Logf("figures: %d records, 1 join and 1 SIGKILL, %v, %d aborted-transaction records seen under read_uncommitted",
		records, time.Since(start).Round(time.Millisecond), r.AbortedRecords)
}
