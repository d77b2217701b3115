package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Network faults between the pipeline and the broker, injected by a Proxy
// in this process so that they work the same on every broker. Only the
// pipeline goes through the proxy; the input producer, the test's admin
// client and the checker talk to the broker directly.

// TestSurvivesNetworkCuts cuts every connection of the pipeline at random
// gaps of 1–3 s for as long as the input flows, then lets it drain: the
// outputs must be exactly-once.
func TestSurvivesNetworkCuts(t *testing.T) {
	requireBinary(t)
	px := startProxy(t, Seeds(requireBroker(t)))
	r := newChaosRun(t, 60_000, func(c *PipelineConfig) { c.Brokers = px.Addrs() })
	p := r.e.startPipeline(r.cfgPath)
	r.midStream("cutting connections")

	// What the group had committed just before and just after each cut.
	type cutAt struct{ before, after int64 }
	var mu sync.Mutex
	var cuts []cutAt
	committed := func() int64 {
		c, _, err := r.e.committed()
		if err != nil {
			return -1
		}
		return c
	}
	const minCuts = 3
	stop := px.StartCuts(CutSchedule{
		Min: time.Second, Max: 3 * time.Second, Seed: e2eSeed(t),
		Before: func(int) {
			c := committed()
			mu.Lock()
			cuts = append(cuts, cutAt{before: c, after: -1})
			mu.Unlock()
		},
		After: func(i int) {
			c := committed()
			mu.Lock()
			cuts[i-1].after = c
			mu.Unlock()
		},
	})
	defer stop()
	WaitFor(t, drainBound, "the input to be produced while connections are cut", func() (bool, string) {
		select {
		case <-p.Exited():
			t.Fatalf("the pipeline exited under network cuts:\n%s", p.Tail(40))
		default:
		}
		st := px.Stats()
		select {
		case <-r.input.Done():
			return st.Cuts >= minCuts, fmt.Sprintf("input done, %d cuts", st.Cuts)
		default:
			return false, fmt.Sprintf("%d of %d input records acked, %d cuts", r.input.Acked(), r.records, st.Cuts)
		}
	})
	fired := stop()
	st := px.Stats()

	mu.Lock()
	midStream := 0
	for i, c := range cuts {
		// Committed offsets only grow: above zero before the cut and short
		// of the input after it means the cut hit a pipeline at work.
		if c.before > 0 && c.after >= 0 && c.after < int64(r.records) {
			midStream++
		}
		t.Logf("cut %d: committed %d before, %d after", i+1, c.before, c.after)
	}
	mu.Unlock()
	if fired < minCuts || st.Cuts != int64(fired) {
		t.Fatalf("%d cuts by the schedule, %d counted by the proxy; want at least %d", fired, st.Cuts, minCuts)
	}
	if st.ConnsCut == 0 {
		t.Fatalf("the cuts closed no connection: %v", st)
	}
	if midStream == 0 {
		t.Fatalf("none of the %d cuts landed while the pipeline had committed some but not all of the input", fired)
	}
	cutOver := time.Now()
	rep := r.drainAndCheck(p)
	if err := px.Err(); err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Logf("figures: %d records, %d cuts (%d mid-stream) closing %d connections over %v; drain, stop and check %v; proxy: %v; %d aborted-transaction records under read_uncommitted (%d commit, %d abort markers), total %v",
		r.records, fired, midStream, st.ConnsCut, cutOver.Sub(r.start).Round(time.Millisecond), time.Since(cutOver).Round(time.Millisecond),
		px.Stats(), rep.AbortedRecords, rep.CommitMarkers, rep.AbortMarkers, time.Since(r.start).Round(time.Millisecond))
}

// Log lines of the pipeline (pipeline/pipeline.go, txsink/errors.go) that
// show an unknown commit outcome handled by rebuilding.
const (
	logUnknownOutcome = "transaction outcome unknown"
	logRebuilding     = "rebuilding the transactional client"
)

// TestLostEndTxnAnswersAreNeverGuessed loses the broker's answers to EndTxn
// (the broker commits, the pipeline does not hear) and drops EndTxn
// requests before they reach the broker, while input flows. The pipeline
// must either learn the outcome from the broker or treat it as unknown and
// rebuild from the committed state; a guess either way shows up as lost or
// doubled outputs.
//
// The input is released in chunks, one per fault, so that each fault meets
// a checkpoint with records (an empty one sends no EndTxn) however fast the
// pipeline is, and the pipeline's recovery is seen as it processing the
// whole chunk.
func TestLostEndTxnAnswersAreNeverGuessed(t *testing.T) {
	requireBinary(t)
	px := startProxy(t, Seeds(requireBroker(t)))
	e := newEnv(t)
	records, chunk := 60_000, 6_000
	if testing.Short() {
		records, chunk = 15_000, 1_500
	}
	const partitions = 3
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	c := e.config(partitions)
	c.Brokers = px.Addrs()
	// An unanswered commit can wait out the checkpoint time-out; a short one
	// keeps the run short.
	c.CheckpointTimeout = 5 * time.Second
	released := 2 * chunk
	r := &chaosRun{t: t, e: e, records: records, cfgPath: c.Write(t, e.logDir), start: time.Now()}
	r.input = StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: 300, Rate: records / 20, Hold: released})
	p := e.startPipeline(r.cfgPath)
	r.midStream("losing EndTxn answers")

	unknownOutcomes := func() int { return len(readPipelineLog(t, p).unknown) }
	type fault struct {
		name string
		lose bool // lose the answer, else fail the request
		// burst: lose every answer until the pipeline reports an unknown
		// outcome, then heal; else one request.
		burst bool
	}
	faults := []fault{
		{name: "EndTxn answer lost", lose: true},
		{name: "EndTxn answer lost", lose: true},
		{name: "EndTxn answer lost", lose: true},
		{name: "EndTxn request failed"},
		{name: "EndTxn request failed"},
		{name: "every EndTxn answer lost", lose: true, burst: true},
	}
	var lost, failed int64
	for i, f := range faults {
		st := px.Stats()
		lostBefore, failedBefore, unknownBefore := st.AnswersLost, st.RequestsFailed, unknownOutcomes()
		switch {
		case f.burst:
			px.LoseAnswers(kmsg.EndTxn, 1_000_000)
		case f.lose:
			px.LoseAnswers(kmsg.EndTxn, 1)
		default:
			px.FailRequests(kmsg.EndTxn, 1)
		}
		released = min(released+chunk, records)
		r.input.Release(released)
		WaitFor(t, 2*time.Minute, fmt.Sprintf("fault %d (%s) to fire", i+1, f.name), func() (bool, string) {
			select {
			case <-p.Exited():
				t.Fatalf("the pipeline exited after fault %d (%s):\n%s", i+1, f.name, p.Tail(40))
			default:
			}
			st := px.Stats()
			switch {
			case f.burst:
				return unknownOutcomes() > unknownBefore, fmt.Sprintf("%d answers lost, no unknown outcome logged yet", st.AnswersLost-lostBefore)
			case f.lose:
				return st.AnswersLost > lostBefore, "no answer lost yet"
			default:
				return st.RequestsFailed > failedBefore, "no request failed yet"
			}
		})
		firedAfter := time.Since(r.start)
		var left int64
		if f.burst {
			left, _ = px.Heal(kmsg.EndTxn)
		}
		st = px.Stats()
		lost += st.AnswersLost - lostBefore
		failed += st.RequestsFailed - failedBefore
		firedAt, _, _ := e.committed()
		// Recovered by itself: everything released so far is committed.
		WaitFor(t, 2*time.Minute, fmt.Sprintf("the pipeline to commit the first %d records after fault %d (%s)", released, i+1, f.name), func() (bool, string) {
			select {
			case <-p.Exited():
				t.Fatalf("the pipeline exited after fault %d (%s):\n%s", i+1, f.name, p.Tail(40))
			default:
			}
			c, _, err := e.committed()
			return err == nil && c >= int64(released), fmt.Sprintf("committed %d (%v)", c, err)
		})
		t.Logf("fault %d (%s) fired after %v with %d committed: %d answers lost, %d requests failed (%d turns healed unused), %d unknown outcomes logged; all %d released records committed after %v",
			i+1, f.name, firedAfter.Round(time.Millisecond), firedAt, st.AnswersLost-lostBefore, st.RequestsFailed-failedBefore, left,
			unknownOutcomes()-unknownBefore, released, time.Since(r.start).Round(time.Millisecond))
	}
	r.input.Release(records)

	var wantLost, wantFailed int64
	for _, f := range faults {
		if f.lose {
			wantLost++
		} else {
			wantFailed++
		}
	}
	if lost < wantLost || failed < wantFailed {
		t.Fatalf("%d EndTxn answers lost (want at least %d), %d EndTxn requests failed (want at least %d)", lost, wantLost, failed, wantFailed)
	}
	rep := r.drainAndCheck(p)
	if err := px.Err(); err != nil {
		t.Fatalf("proxy: %v", err)
	}
	log := readPipelineLog(t, p)
	if len(log.unknown) == 0 {
		t.Fatalf("the pipeline's log shows no unknown transaction outcome although every EndTxn answer was lost for a while:\n%s", p.Tail(40))
	}
	// It said it did not know, and rebuilt rather than carry on as though
	// the checkpoint had failed or succeeded.
	var unknownRecords int64
	for id, n := range log.unknown {
		if !log.rebuilt[id] {
			t.Errorf("checkpoint %d: outcome unknown, but no rebuild followed", id)
		}
		unknownRecords += n
	}
	// The pipeline counts a checkpoint's input only once the broker
	// confirms its commit. Input it never counted can only be in a
	// checkpoint it called unknown (which the broker may have committed:
	// the checker found every output exactly once, so it was not redone);
	// input counted beyond the total would be a commit claimed twice.
	uncounted := int64(r.records) - log.recordsIn
	if log.recordsIn < 0 || uncounted < 0 || uncounted > unknownRecords {
		t.Fatalf("the pipeline counts %d of %d input records as committed by itself; its unknown-outcome checkpoints held %d", log.recordsIn, r.records, unknownRecords)
	}
	t.Logf("figures: %d records, %d EndTxn answers lost, %d EndTxn requests failed, %d EndTxn requests reached the broker; %d unknown outcomes (%d records) each followed by a rebuild, %d records committed without the pipeline hearing of it; %d aborted-transaction records under read_uncommitted (%d commit, %d abort markers), total %v",
		r.records, lost, failed, px.RequestsOf(kmsg.EndTxn), len(log.unknown), unknownRecords, uncounted,
		rep.AbortedRecords, rep.CommitMarkers, rep.AbortMarkers, time.Since(r.start).Round(time.Millisecond))
}

// pipelineLog is what the scenario reads from a stopped pipeline's log.
type pipelineLog struct {
	unknown   map[int64]int64 // checkpoint id → records, for each unknown outcome
	rebuilt   map[int64]bool  // checkpoint ids after which the client was rebuilt
	recordsIn int64           // input records in checkpoints the pipeline saw commit; -1 if not logged
}

// readPipelineLog reads the pipeline's text log (log/slog's key=value
// lines): the "checkpoint aborted" lines whose error is an unknown outcome,
// the rebuilds, and the "pipeline stopped" totals.
func readPipelineLog(t *testing.T, p *Process) pipelineLog {
	t.Helper()
	b, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	l := pipelineLog{unknown: make(map[int64]int64), rebuilt: make(map[int64]bool), recordsIn: -1}
	field := func(line, key string) int64 {
		_, rest, ok := strings.Cut(line, " "+key+"=")
		if !ok {
			return -1
		}
		v, _, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	for line := range strings.Lines(string(b)) {
		switch {
		case strings.Contains(line, `msg="checkpoint aborted"`) && strings.Contains(line, logUnknownOutcome):
			l.unknown[field(line, "checkpoint")] = field(line, "records")
		case strings.Contains(line, logRebuilding):
			l.rebuilt[field(line, "checkpoint")] = true
		case strings.Contains(line, `msg="pipeline stopped"`):
			l.recordsIn = field(line, "records_in")
		}
	}
	return l
}

// TestProduceErrorsAbortAndReplay corrupts one record batch in some of the
// pipeline's produce requests on their way to the broker, which refuses
// that batch (CORRUPT_MESSAGE) while the rest of the transaction stands:
// each such checkpoint must abort, and replay, with nothing lost or doubled.
func TestProduceErrorsAbortAndReplay(t *testing.T) {
	requireBinary(t)
	px := startProxy(t, Seeds(requireBroker(t)))
	r := newChaosRun(t, 60_000, func(c *PipelineConfig) { c.Brokers = px.Addrs() })
	p := r.e.startPipeline(r.cfgPath)
	r.midStream("corrupting produce requests")
	const bursts = 3
	for i := range bursts {
		want := px.Corrupted() + 1
		px.CorruptProduceRequests(1)
		WaitFor(t, time.Minute, fmt.Sprintf("produce request %d to be corrupted", i+1), func() (bool, string) {
			select {
			case <-p.Exited():
				t.Fatalf("the pipeline exited after a produce error:\n%s", p.Tail(40))
			default:
			}
			return px.Corrupted() >= want, fmt.Sprintf("%d produce requests corrupted", px.Corrupted())
		})
		c, _, err := r.e.committed()
		t.Logf("produce request %d corrupted, %d of %d committed (%v)", i+1, c, r.records, err)
		time.Sleep(time.Second)
	}
	rep := r.drainAndCheck(p)
	if err := px.Err(); err != nil {
		t.Fatalf("proxy: %v", err)
	}
	if got := px.Corrupted(); got != bursts {
		t.Fatalf("%d produce requests corrupted, want %d", got, bursts)
	}
	// Each refused batch must show as an aborted checkpoint naming the
	// broker's refusal (two can share one checkpoint).
	log := readFile(t, p.LogPath())
	refused := 0
	for line := range strings.Lines(log) {
		if strings.Contains(line, logCheckpointAborted+`"`) && strings.Contains(line, "CORRUPT_MESSAGE") {
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("%d produce requests were corrupted, but the pipeline's log shows no checkpoint aborted for CORRUPT_MESSAGE", bursts)
	}
	t.Logf("figures: %d records, %d produce requests corrupted, %d checkpoints aborted for CORRUPT_MESSAGE, %d aborted-transaction records under read_uncommitted (%d abort markers), total %v",
		r.records, bursts, refused, rep.AbortedRecords, rep.AbortMarkers, time.Since(r.start).Round(time.Millisecond))
}

const logCheckpointAborted = `msg="checkpoint aborted`

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
