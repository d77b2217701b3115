package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// audit runs `pipeline audit` with a stopped scenario's own config file
// and fails the test unless every check holds and the committed progress
// records account for exactly inputRecords input records: an audit that
// saw less than the run would pass over what it did not see.
func (e *env) audit(cfgPath string, inputRecords int) *AuditResult {
	e.t.Helper()
	start := time.Now()
	a, err := RunAudit(e.t.Context(), requireBinary(e.t), cfgPath)
	if err != nil {
		e.t.Fatal(err)
	}
	switch {
	case a.ExitCode != 0:
		e.t.Fatalf("pipeline audit found violations (exit %d):\n%s", a.ExitCode, a.Output)
	case a.Checkpoints == 0:
		e.t.Fatalf("pipeline audit passed without a single committed checkpoint to check:\n%s", a.Output)
	case a.InputRecords != int64(inputRecords):
		e.t.Fatalf("pipeline audit accounted for %d input records, the run consumed %d:\n%s", a.InputRecords, inputRecords, a.Output)
	}
	e.t.Logf("%s (%v)", a.Summary(), time.Since(start).Round(time.Millisecond))
	return a
}

// TestAuditFailsOnATamperedHistory shows that the audit the scenarios run
// can fail: after a clean run that it passes, one output record is copied
// into the output inside a committed transaction of a producer that is not
// the pipeline's, and then the group's offset on one input partition is
// moved back. Each must make `pipeline audit` exit with status 1 (its
// status for violations found), naming the check and the partition.
func TestAuditFailsOnATamperedHistory(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, records, keys = 3, 3_000, 50
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	pc := e.config(partitions)
	// A short session, so the stopped static member is gone from the group
	// soon and its offsets can be moved by hand.
	pc.SessionTimeout = 6 * time.Second
	cfgPath := pc.Write(t, e.logDir)
	// Input flows for a few seconds, so that the history has several
	// checkpoints to account for.
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: records / 3})
	p := e.startPipeline(cfgPath)
	input.Wait(t)
	end := e.inputEnd()
	e.waitInputCommitted(t, end)
	p.Term()
	CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
	clean := e.audit(cfgPath, records)

	// Fault 1: a committed duplicate in the output.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := offsets.ReadToEnd(ctx, e.cl, e.output, true)
	if err != nil || len(out) == 0 {
		t.Fatalf("reading the output back: %d records (%v)", len(out), err)
	}
	victim := out[len(out)/2]
	forger, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.TransactionalID(e.group+"-forger"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	if err := forger.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	dup := &kgo.Record{Topic: e.output, Partition: victim.Partition, Key: victim.Key, Value: victim.Value}
	if err := forger.ProduceSync(ctx, dup).FirstErr(); err != nil {
		t.Fatalf("producing the forged record: %v", err)
	}
	if err := forger.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("committing the forged record: %v", err)
	}
	// The fault fired: the checker, reading the topics on its own, sees the
	// duplicate.
	r, err := Verify(t.Context(), e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Violations[NoDuplicates].Count; n != 1 {
		t.Fatalf("after forging one duplicate the checker finds %d duplicates:\n%s", n, r)
	}
	where := fmt.Sprintf("%s/%d", e.output, victim.Partition)
	a := mustAudit(t, cfgPath)
	found := auditFindings(a, "output-count")
	if a.ExitCode != 1 || len(found) != 1 || !strings.HasPrefix(found[0], "output-count "+where+":") {
		t.Fatalf("pipeline audit after a forged duplicate in %s: exit %d, output-count findings %q; want exit status 1 and one finding for %s:\n%s",
			where, a.ExitCode, found, where, a.Output)
	}
	t.Logf("forged duplicate in %s@%d: %s; %s", where, victim.Offset, a.Summary(), found[0])

	// Fault 2: the group's offset on one input partition moved back by 10,
	// so a restart would consume those records twice.
	var moved int32 = -1
	var from int64
	for part, o := range end {
		if o >= 10 {
			moved, from = part, o
			break
		}
	}
	if moved < 0 {
		t.Fatalf("no input partition holds 10 records: %v", sorted(end))
	}
	back := kadm.Offsets{}
	back.AddOffset(e.input, moved, from-10, -1)
	// The stopped instance stays a static member until its session ends;
	// offsets of a group with members cannot be committed from outside.
	WaitFor(t, time.Minute, "the group's offsets to be moved back by hand", func() (bool, string) {
		resp, err := e.adm.CommitOffsets(ctx, e.group, back)
		if err == nil {
			err = resp.Error()
		}
		return err == nil, fmt.Sprint(err)
	})
	if _, c, err := e.committed(); err != nil || c[moved] != from-10 {
		t.Fatalf("the group's offset on %s/%d is %d after moving it back to %d (%v)", e.input, moved, c[moved], from-10, err)
	}
	a = mustAudit(t, cfgPath)
	found = auditFindings(a, "offsets")
	where = fmt.Sprintf("%s/%d", e.input, moved)
	if a.ExitCode != 1 || len(found) != 1 || !strings.HasPrefix(found[0], "offsets "+where+":") {
		t.Fatalf("pipeline audit after moving %s back: exit %d, offsets findings %q; want exit status 1 and one finding for %s:\n%s",
			where, a.ExitCode, found, where, a.Output)
	}
	t.Logf("offset of %s moved back from %d to %d: %s; %s", where, from, from-10, a.Summary(), found[0])
	t.Logf("figures: %d records; before the faults %s; both faults found", records, clean.Summary())
}

// mustAudit runs the audit, failing the test only if it could not run.
func mustAudit(t *testing.T, cfgPath string) *AuditResult {
	t.Helper()
	a, err := RunAudit(t.Context(), requireBinary(t), cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
