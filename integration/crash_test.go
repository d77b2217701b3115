package integration

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestSurvivesRepeatedSIGKILL(t *testing.T) {
	runRestarts(t, restartPlan{
		stop:       (*Process).Kill,
		stopName:   "SIGKILL",
		stops:      5,
		records:    200_000,
		short:      20_000,
		keys:       1_000,
		partitions: 4,
	})
}

func TestCleanRestarts(t *testing.T) {
	runRestarts(t, restartPlan{
		stop:       (*Process).Term,
		stopName:   "SIGTERM",
		stops:      3,
		records:    200_000,
		short:      20_000,
		keys:       1_000,
		partitions: 4,
	})
}

// restartPlan is a run of the keyed pass-through in which the pipeline is
// stopped and restarted while input flows.
type restartPlan struct {
	stop     func(*Process) // asserts the stop happened the way it should
	stopName string
	stops    int
	// records flow in a normal run, short ones under -short.
	records, short int
	keys           int
	partitions     int
}

const (
	minStopDelay = 500 * time.Millisecond
	maxStopDelay = 3 * time.Second
	// drainBound is how long the last pipeline gets to catch up with the
	// input once it has all been produced.
	drainBound = 2 * time.Minute
)

func runRestarts(t *testing.T, plan restartPlan) {
	requireBinary(t)
	e := newEnv(t)
	records := plan.records
	if testing.Short() {
		records = plan.short
	}
	CreateTopics(t, e.adm, int32(plan.partitions), e.input, e.output)
	cfgPath := e.config(plan.partitions).Write(t, e.logDir)
	rng := rand.New(rand.NewPCG(e2eSeed(t), 0))

	// The input keeps flowing for longer than the longest stop schedule, so
	// every stop lands mid-stream whatever the pipeline's speed.
	span := time.Duration(plan.stops)*maxStopDelay + 5*time.Second
	rate := max(1, int(float64(records)/span.Seconds()))
	t.Logf("%d records over %d keys at %d/s (~%v), %d %ss", records, plan.keys, rate, span, plan.stops, plan.stopName)

	start := time.Now()
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: plan.keys, Rate: rate})
	var lastCommitted int64
	for i := range plan.stops {
		p := e.startPipeline(cfgPath)
		delay := minStopDelay + time.Duration(rng.Int64N(int64(maxStopDelay-minStopDelay)))
		p.sleepOrExit(t.Context(), delay)
		plan.stop(p)

		// Committed offsets only grow, so a count short of the input after
		// the stop was short of it at the stop: the output was not complete,
		// and the stop hit a pipeline with work left.
		// A broker started moments ago may not have its group
		// coordinator ready yet; that is not what this test is about.
		var committed int64
		WaitFor(t, 30*time.Second, fmt.Sprintf("the group's committed offsets after %s %d", plan.stopName, i+1), func() (bool, string) {
			c, _, err := e.committed()
			committed = c
			return err == nil, fmt.Sprint(err)
		})
		if committed >= int64(records) {
			t.Fatalf("%s %d came after the pipeline had committed all %d records: it did not happen mid-stream", plan.stopName, i+1, records)
		}
		t.Logf("%s %d/%d after %v: %d input records acked, %d committed (+%d)",
			plan.stopName, i+1, plan.stops, delay.Round(time.Millisecond), input.Acked(), committed, committed-lastCommitted)
		lastCommitted = committed
	}
	if lastCommitted == 0 {
		t.Fatalf("the pipeline committed nothing across %d %ss: every stop hit start-up, none hit a pipeline at work", plan.stops, plan.stopName)
	}

	p := e.startPipeline(cfgPath)
	input.Wait(t)
	t.Logf("input all acked after %v", time.Since(start).Round(time.Millisecond))
	end := e.inputEnd()
	e.waitInputCommitted(t, end, p)
	t.Logf("drained after %v", time.Since(start).Round(time.Millisecond))
	p.Term()

	checkStart := time.Now()
	r := CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
	e.audit(cfgPath, records)
	t.Logf("figures: %d records, %d %ss, %v (checker %v), %d aborted-transaction records seen under read_uncommitted (%d abort, %d commit markers)",
		records, plan.stops, plan.stopName, time.Since(start).Round(time.Millisecond), time.Since(checkStart).Round(time.Millisecond),
		r.AbortedRecords, r.AbortMarkers, r.CommitMarkers)
}

// waitInputCommitted waits (up to drainBound) until the group's committed
// offsets reach end, failing at once if one of procs exits meanwhile.
func (e *env) waitInputCommitted(t *testing.T, end map[int32]int64, procs ...*Process) {
	t.Helper()
	WaitFor(t, drainBound, "the group's committed offsets to reach the input end", func() (bool, string) {
		for _, p := range procs {
			select {
			case <-p.Exited():
				t.Fatalf("a pipeline exited on its own while draining:\n%s", p.Tail(40))
			default:
			}
		}
		_, c, err := e.committed()
		return err == nil && offsetsReached(c, end), fmt.Sprintf("committed %v, input end %v (%v)", sorted(c), sorted(end), err)
	})
}

// offsetsReached reports whether committed offsets are at the end of every
// partition; an empty partition needs no commit.
func offsetsReached(committed, end map[int32]int64) bool {
	for p, o := range end {
		if c, ok := committed[p]; c != o && (ok || o != 0) {
			return false
		}
	}
	return true
}

// e2eSeed returns the seed of the run's random schedule: E2E_SEED if set,
// so a failed run can be replayed, else a fresh one. It is always logged.
func e2eSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("E2E_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("E2E_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay with E2E_SEED=%d)", seed, seed)
	return seed
}

// sorted renders a partition → offset map in partition order.
func sorted(m map[int32]int64) string {
	s := "["
	for i, p := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d:%d", p, m[p])
	}
	return s + "]"
}
