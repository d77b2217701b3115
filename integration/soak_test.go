// The soak: a keyed pass-through and a keyed count in one pipeline, run by
// one or two instances while input flows, hit by faults drawn at random
// from faultMenu (faults_test.go), in rounds; after each round the input is
// drained and every invariant checked. The first violation stops the run
// and fails it with the seed that replays the same faults in the same
// order, and the faults so far.
//
// The default run (CI) is bounded: 2 rounds of 2–3 faults, 3–7 s apart,
// about a minute and a half in all (one round under -short).
// E2E_SOAK=DURATION (a Go duration) soaks for that long instead, in rounds
// of 3–5 faults 10–20 s apart, until the duration has passed; give go test
// a -timeout above it:
//
//	cd integration && E2E_SOAK=10m go test -count=1 -timeout 30m -run 'TestSoak$' .
//	E2E_SEED=N E2E_SOAK=10m ...   replays the faults of a failed run
//
// docs/operations.md ("Soaking a build") has the rest.

package integration

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// soakPlan is how long and how hard a soak run goes.
type soakPlan struct {
	// budget, when positive, runs rounds until it has passed; else rounds
	// are run.
	budget         time.Duration
	rounds         int
	faultsPerRound [2]int // least, most
	gap            [2]time.Duration
	rate           int // input records per second
}

func soakPlanFromEnv(t *testing.T) soakPlan {
	t.Helper()
	plan := soakPlan{
		rounds:         2,
		faultsPerRound: [2]int{2, 3},
		gap:            [2]time.Duration{3 * time.Second, 7 * time.Second},
		rate:           2_000,
	}
	if s := os.Getenv("E2E_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("E2E_SOAK=%q: want a positive Go duration such as 10m", s)
		}
		// Gentler input: every round's check reads everything so far.
		plan = soakPlan{
			budget:         d,
			faultsPerRound: [2]int{3, 5},
			gap:            [2]time.Duration{10 * time.Second, 20 * time.Second},
			rate:           500,
		}
	} else if testing.Short() {
		plan.rounds = 1
	}
	return plan
}

// firedFault is one fault the soak applied.
type firedFault struct {
	round  int
	at     time.Duration // since the soak started
	name   string
	detail string
}

func (f firedFault) String() string {
	return fmt.Sprintf("round %d, %v: %s: %s", f.round, f.at.Round(time.Millisecond), f.name, f.detail)
}

// soakConfig is state_test's count-per-key pipeline (countConfig) with a
// keyed pass-through beside it, from the same source: the pass-through's
// output is checked record by record (CheckRun), the count's key by key.
func soakConfig(t *testing.T, e *env, partitions int, instance, passTopic, broker string) string {
	t.Helper()
	cfg := countConfig(e, partitions, fmt.Sprintf("  pass: {from: doubled, topic: %q}\n", passTopic))
	cfg = mustReplace(t, cfg, fmt.Sprintf("brokers: [%q]", e.seeds[0]), fmt.Sprintf("brokers: [%q]", broker))
	cfg = mustReplace(t, cfg, "instance_id: i1", "instance_id: "+instance)
	// A pause longer than the transaction time-out must fit in a soak
	// round: short time-outs, within the pipeline's rule that
	// transactions.timeout exceed checkpoint.interval + checkpoint.timeout.
	cfg = mustReplace(t, cfg, "checkpoint: {interval: 300ms, timeout: 10s}", "checkpoint: {interval: 300ms, timeout: 5s}")
	cfg = mustReplace(t, cfg, "transactions: {timeout: 30s}", "transactions: {timeout: "+soakTxnTimeout.String()+"}")
	cfg = mustReplace(t, cfg, "session_timeout: 10s", "session_timeout: "+soakSessionTimeout.String())
	cfg = mustReplace(t, cfg, "steps:\n  - name: per_key\n", fmt.Sprintf("steps:\n  - name: doubled\n    map: {value: %s}\n  - name: per_key\n    from: in\n", strconv.Quote(PassThroughDoubled)))
	cfg = mustReplace(t, cfg, "sinks:\n  out: {topic: ", "sinks:\n  out: {from: per_key, topic: ")
	path := filepath.Join(e.logDir, instance+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	soakTxnTimeout     = 10 * time.Second
	soakSessionTimeout = 6 * time.Second
)

// TestSoak: see the top of this file.
func TestSoak(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	plan := soakPlanFromEnv(t)
	const partitions, keys, maxInstances = 4, 500, 2
	passTopic := e.output + "-doubled"
	CreateTopics(t, e.adm, partitions, e.input, e.output, passTopic)
	// The instances reach the broker through a proxy, for net-cut; it
	// closes after them (cleanups run last first).
	px := startProxy(t, e.seeds)
	t.Cleanup(func() {
		if err := px.Err(); err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	cfgs := map[string]string{}
	for _, id := range []string{"i1", "i2"} {
		cfgs[id] = soakConfig(t, e, partitions, id, passTopic, px.Addrs()[0])
	}
	seed := e2eSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	g := newInstanceGroup(t, e, cfgs)
	fr := &faultRun{t: t, e: e, g: g, rng: rng, maxInstances: maxInstances, txnTimeout: soakTxnTimeout, sessionTimeout: soakSessionTimeout, proxy: px}
	deck := &faultDeck{rng: rng, menu: faultMenu}

	var fired []firedFault
	replay := func() string {
		s := fmt.Sprintf("seed %d: replay with E2E_SEED=%d", seed, seed)
		if plan.budget > 0 {
			s += " E2E_SOAK=" + plan.budget.String()
		}
		var b strings.Builder
		for _, f := range fired {
			b.WriteString("\n  " + f.String())
		}
		return s + "; faults so far:" + cmp.Or(b.String(), " none")
	}
	// Any failure, a violation or a fault that did not fire, names the
	// seed and what happened before it.
	reported := false
	t.Cleanup(func() {
		if t.Failed() && !reported {
			t.Logf("soak failed; %s", replay())
		}
	})
	round := 0
	violation := func(format string, args ...any) {
		t.Helper()
		reported = true
		t.Fatalf("VIOLATION in round %d: %s\n%s", round+1, fmt.Sprintf(format, args...), replay())
	}

	start := time.Now()
	since := func() time.Duration { return time.Since(start).Round(time.Millisecond) }
	var input *InputProducer
	released, checked := 0, 0
	more := func() bool {
		if plan.budget > 0 {
			return time.Since(start) < plan.budget
		}
		return round < plan.rounds
	}
	for ; more(); round++ {
		nFaults := plan.faultsPerRound[0] + rng.IntN(plan.faultsPerRound[1]-plan.faultsPerRound[0]+1)
		gaps := make([]time.Duration, nFaults)
		span := 2 * time.Second
		for i := range gaps {
			gaps[i] = plan.gap[0] + time.Duration(rng.Int64N(int64(plan.gap[1]-plan.gap[0])))
			span += gaps[i] + 2*time.Second
		}
		// The round's input flows through its faults; its last tenth is
		// held back until they are over, so that each lands with work left.
		roundEnd := released + int(span.Seconds()*float64(plan.rate))
		released += (roundEnd - released) * 9 / 10
		if input == nil {
			input = StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: 1 << 30, Keys: keys, Rate: plan.rate, Hold: released})
			g.start("i1")
			WaitFor(t, time.Minute, "the pipeline to commit something", func() (bool, string) {
				if err := g.exited(); err != nil {
					violation("%v", err)
				}
				c, _, err := e.committed()
				return err == nil && c > 0, fmt.Sprintf("committed %d (%v)", c, err)
			})
		} else {
			input.Release(released)
		}
		t.Logf("round %d at %v: %d faults, %d input records (to seq %d), gaps %v", round+1, since(), nFaults, roundEnd-checked, roundEnd, gaps)
		// A fault may let some of the held tail through early, never more
		// than half of it, so later faults still land with work left.
		feedTo := released + (roundEnd-released)/2
		fr.feed = func(n int) int {
			n = min(n, feedTo-released)
			released += n
			input.Release(released)
			return n
		}

		for _, gap := range gaps {
			if err := g.watch(t.Context(), gap); err != nil {
				violation("%v", err)
			}
			f, err := deck.draw(fr)
			if err != nil {
				t.Fatal(err)
			}
			at := since()
			detail, err := f.apply(fr)
			if err != nil {
				if xerr := g.exited(); xerr != nil {
					violation("during fault %s: %v", f.name, xerr)
				}
				t.Fatalf("fault %s did not fire: %v", f.name, err)
			}
			committed := committedNow(t, e)
			// Committed offsets only grow: short of the round's input now,
			// they were short of it when the fault hit.
			if committed == 0 || committed >= int64(roundEnd) {
				t.Fatalf("fault %s did not land with work left: %d of %d committed", f.name, committed, roundEnd)
			}
			fired = append(fired, firedFault{round: round + 1, at: at, name: f.name, detail: detail})
			t.Logf("fault %d at %v: %s: %s; %d of %d input records committed, instances now %v",
				len(fired), at, f.name, detail, committed, roundEnd, g.running())
		}

		released = roundEnd
		input.Release(released)
		soakDrain(t, e, g, input, released, violation)
		checkSoakRound(t, e, passTopic, released, keys, violation)
		checked = released
		t.Logf("round %d checked at %v: %d input records so far, every invariant holds", round+1, since(), released)
	}

	// Stopped, the picture must be the same, with nothing left open, and
	// the pipeline's own account of its history must agree.
	g.termAll()
	checkSoakRound(t, e, passTopic, released, keys, violation)
	e.audit(cfgs["i1"], released)

	byKind := map[string]int{}
	for _, f := range fired {
		byKind[f.name]++
	}
	want := 0
	if plan.budget == 0 {
		want = plan.rounds * plan.faultsPerRound[0]
	}
	if len(fired) == 0 || len(fired) < want {
		t.Fatalf("%d faults fired, want at least %d", len(fired), max(want, 1))
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	t.Logf("figures: seed %d, %d rounds, %d records checked (pass-through and count per key), %d faults fired (%s), 0 violations, %v",
		seed, round, released, len(fired), strings.Join(kinds, ", "), since())
}

// soakDrain waits for the input of the round to be acknowledged and for the
// group to commit all of it. A pipeline that stops making progress, or an
// instance that exits, is a violation.
func soakDrain(t *testing.T, e *env, g *instanceGroup, input *InputProducer, records int, violation func(string, ...any)) {
	t.Helper()
	WaitFor(t, 2*time.Minute, fmt.Sprintf("the input to reach %d records", records), func() (bool, string) {
		if err := input.firstErr(); err != nil {
			t.Fatalf("input: %v", err)
		}
		return input.Acked() == int64(records), fmt.Sprintf("%d acknowledged", input.Acked())
	})
	end := e.inputEnd()
	start := time.Now()
	var status string
	for {
		if err := g.exited(); err != nil {
			violation("%v", err)
		}
		_, c, err := e.committed()
		if err == nil && offsetsReached(c, end) {
			return
		}
		status = fmt.Sprintf("committed %v, input end %v (%v)", sorted(c), sorted(end), err)
		if time.Since(start) > drainBound {
			violation("the group did not commit the input within %v: %s", drainBound, status)
		}
		if err := sleepCtx(t.Context(), 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

// checkSoakRound checks the pass-through output against every invariant
// and the count per key against the input so far.
func checkSoakRound(t *testing.T, e *env, passTopic string, records, keys int, violation func(string, ...any)) {
	t.Helper()
	r, err := Verify(t.Context(), e.seeds, CheckSpec{Input: e.input, Output: passTopic, Group: e.group, InputRecords: records})
	if err != nil {
		t.Fatalf("checker could not judge the run: %v", err)
	}
	if !r.OK() {
		violation("invariants violated: %v\n%s", r.Violated(), r)
	}
	if err := settleTransactions(t.Context(), e, 30*time.Second, e.output); err != nil {
		violation("count output: %v", err)
	}
	problems, n, err := countProblems(t.Context(), e, e.output, expectedCounts(records, func(seq int) string { return InputKey(seq, keys) }))
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		violation("count per key, %d problems:\n%s", len(problems), strings.Join(problems[:min(len(problems), 10)], "\n"))
	}
	t.Logf("checker: %s; counts: %d outputs over %d keys, each rising and exact", r.Summary(), n, keys)
}
