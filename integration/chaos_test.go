package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chaosRun is a keyed pass-through with input flowing, for the fault
// scenarios below: start it, inject, then drain and check.
type chaosRun struct {
	t       *testing.T
	e       *env
	records int
	cfgPath string
	input   *InputProducer
	start   time.Time
}

func newChaosRun(t *testing.T, records int, edit func(*PipelineConfig)) *chaosRun {
	t.Helper()
	requireBinary(t)
	e := newEnv(t)
	if testing.Short() {
		records /= 4
	}
	const partitions = 3
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	c := e.config(partitions)
	if edit != nil {
		edit(&c)
	}
	path := filepath.Join(e.logDir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(c.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &chaosRun{t: t, e: e, records: records, cfgPath: path, start: time.Now()}
	r.input = StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: 300, Rate: records / 20})
	return r
}

// midStream fails the test unless the group has committed something, but
// not everything: a fault injected now hits a pipeline at work.
func (r *chaosRun) midStream(what string) {
	r.t.Helper()
	WaitFor(r.t, time.Minute, "the pipeline to commit something before "+what, func() (bool, string) {
		c, _, err := r.e.committed()
		return err == nil && c > 0, fmt.Sprintf("committed %d (%v)", c, err)
	})
	c, _, err := r.e.committed()
	if err != nil || c >= int64(r.records) {
		r.t.Fatalf("%s would not happen mid-stream: committed %d of %d (%v)", what, c, r.records, err)
	}
	r.t.Logf("%s after %v: %d of %d committed", what, time.Since(r.start).Round(time.Millisecond), c, r.records)
}

// drainAndCheck waits for p to commit the whole input, stops it cleanly and
// runs the checker.
func (r *chaosRun) drainAndCheck(p *Process) *Report {
	r.t.Helper()
	r.input.Wait(r.t)
	end := r.e.inputEnd()
	r.e.waitInputCommitted(r.t, end, p)
	p.Term()
	rep := CheckRun(r.t, r.e.seeds, CheckSpec{Input: r.e.input, Output: r.e.output, Group: r.e.group, InputRecords: r.records})
	r.e.audit(r.cfgPath, r.records)
	return rep
}

// TestPausedLongerThanTheTransactionTimeout freezes the pipeline (SIGSTOP)
// for longer than its transaction time-out: the broker aborts its open
// transaction and its group session expires. Resumed (SIGCONT), it must
// notice, recover by itself and go on with nothing lost or doubled.
func TestPausedLongerThanTheTransactionTimeout(t *testing.T) {
	const txnTimeout = 12 * time.Second
	r := newChaosRun(t, 60_000, func(c *PipelineConfig) {
		c.TxnTimeout = txnTimeout
		c.SessionTimeout = 6 * time.Second
	})
	p := r.e.startPipeline(r.cfgPath)
	r.midStream("SIGSTOP")
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	stoppedAt := time.Now()
	// While stopped it commits nothing: prove the pause took hold.
	before, _, _ := r.e.committed()
	time.Sleep(txnTimeout + 4*time.Second) // the fault is the passing of time itself
	after, _, _ := r.e.committed()
	if after != before {
		t.Fatalf("the group committed %d records while the pipeline was stopped: SIGSTOP did not take hold", after-before)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	t.Logf("SIGCONT after %v stopped (transaction time-out %v)", time.Since(stoppedAt).Round(time.Millisecond), txnTimeout)
	rep := r.drainAndCheck(p)
	// The pipeline must have met the consequence of the pause: a checkpoint
	// that could not commit.
	log, _ := os.ReadFile(p.LogPath())
	if !strings.Contains(string(log), "checkpoint") || !(strings.Contains(string(log), "rebuilding") || strings.Contains(string(log), "aborted")) {
		t.Fatalf("the pipeline's log shows no failed checkpoint after the pause:\n%s", p.Tail(40))
	}
	t.Logf("figures: %d records, paused %v, %d aborted-transaction records under read_uncommitted", r.records, txnTimeout+4*time.Second, rep.AbortedRecords)
}

// TestZombieTwinIsFencedAndExits starts a second process with the same
// instance id while the first still runs. One of them is fenced (its
// producer by the other's transactional id, its membership by the other's
// group.instance.id) and must exit with a clear message rather than loop;
// the outputs stay exactly-once.
func TestZombieTwinIsFencedAndExits(t *testing.T) {
	r := newChaosRun(t, 60_000, func(c *PipelineConfig) { c.SessionTimeout = 6 * time.Second })
	first := r.e.startPipeline(r.cfgPath)
	r.midStream("starting the twin")
	second := r.e.startPipeline(r.cfgPath)

	var zombie, survivor *Process
	WaitFor(t, 2*time.Minute, "one of the twins to exit", func() (bool, string) {
		select {
		case <-first.Exited():
			zombie, survivor = first, second
			return true, ""
		case <-second.Exited():
			zombie, survivor = second, first
			return true, ""
		default:
			return false, "both still running"
		}
	})
	state := zombie.Wait(time.Second)
	if state.ExitCode() != 1 {
		t.Fatalf("the fenced twin exited with %v, want exit status 1", state)
	}
	tail := zombie.Tail(20)
	if !strings.Contains(tail, "fenced") || !strings.Contains(tail, "instance_id") {
		t.Fatalf("the fenced twin's last words do not say it was fenced by a twin with its instance_id:\n%s", tail)
	}
	t.Logf("the fenced twin (pid %d) exited: %s", zombie.Pid(), lastLine(tail))
	rep := r.drainAndCheck(survivor)
	t.Logf("figures: %d records, 1 twin fenced, %d aborted-transaction records under read_uncommitted", r.records, rep.AbortedRecords)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
