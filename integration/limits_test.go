package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestRecordsTooLargeForTheOutputTopicAreDeadLettered writes to an output
// topic created with max.message.bytes=2000 while 1 % of the outputs are
// 2.4 KB. The broker refuses a batch over the topic's limit whole; the
// pipeline used to put those records in batches with normal ones, had
// every checkpoint refused (MESSAGE_TOO_LARGE), and stopped after ten with
// no output and no dead letters. Each output topic's limit is now read at
// start-up: batches are sized by it, and a record that cannot fit goes to
// the dead-letter topic, exactly once, naming the limit.
func TestRecordsTooLargeForTheOutputTopicAreDeadLettered(t *testing.T) {
	e := newEnv(t)
	const partitions, keys, records = 3, 200, 20_000
	dlq := e.group + "-dlq"
	CreateTopics(t, e.adm, partitions, e.input, dlq)
	limit := "2000"
	CreateTopicsWith(t, e.adm, partitions, map[string]*string{"max.message.bytes": &limit}, e.output)
	big := func(seq int) bool { return seq%100 == 37 }
	c := e.config(partitions)
	c.Map = `value.seq % 100 == 37 ? {k: value.k, seq: value.seq, doubled: value.seq * 2, pad: repeat("x", 2400)} : {k: value.k, seq: value.seq, doubled: value.seq * 2}`
	cfgPath := filepath.Join(e.logDir, "limits.yaml")
	if err := os.WriteFile(cfgPath, []byte(c.YAML()+fmt.Sprintf("dead_letter: {topic: %q}\n", dlq)), 0o644); err != nil {
		t.Fatal(err)
	}
	ProduceInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys})

	p := e.startPipeline(cfgPath)
	e.waitInputCommitted(t, e.inputEnd(), p)
	p.Term()

	bigValues := map[string]int{}
	for seq := range records {
		if big(seq) {
			bigValues[string(InputValue(seq, keys))] = seq
		}
	}
	CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records - len(bigValues),
		Skip: func(v []byte) bool { _, ok := bigValues[string(v)]; return ok }})
	dead := checkDeadLetters(t, e, dlq, bigValues, "out", func(int) string { return "larger than the max.message.bytes (2000) of topic " + e.output })
	log, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`msg="pipeline stopped".* checkpoints_aborted=(\d+)`).FindSubmatch(log)
	if m == nil {
		t.Fatalf("no summary line in the pipeline's log:\n%s", p.Tail(20))
	}
	if n, _ := strconv.Atoi(string(m[1])); n != 0 {
		t.Fatalf("%d checkpoints aborted: a batch over the topic's limit reached the broker\n%s", n, p.Tail(20))
	}
	t.Logf("figures: %d records, %d over the output topic's 2000-byte limit dead-lettered once (%d in aborted transactions), 0 checkpoints aborted",
		records, len(bigValues), dead.AbortedRecords)
}
