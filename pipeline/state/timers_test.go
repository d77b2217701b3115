package state

import (
	"testing"
	"time"
)

func popAll(t *testing.T, tm *Timers, d TimeDomain, upTo int64) []string {
	t.Helper()
	var out []string
	for {
		x, ok, err := tm.Pop(d, upTo)
		ok2(t, err)
		if !ok {
			return out
		}
		out = append(out, string(x.Key)+"@"+time.UnixMilli(x.Time.UnixMilli()).UTC().Format("05.000"))
	}
}

func ok2(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ms(n int64) time.Time { return time.UnixMilli(n) }

func TestTimersFireInTimeOrderOncePerKeyAndTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		s := mustOpen(t, bk.new(t), nil)
		tm := must[*Timers](t)(NewTimers(s, "t"))
		ok(t, tm.Set([]byte("b"), ms(2000), EventTime))
		ok(t, tm.Set([]byte("a"), ms(3000), EventTime))
		ok(t, tm.Set([]byte("a"), ms(1000), EventTime))
		ok(t, tm.Set([]byte("a"), ms(1000), EventTime)) // twice: one timer
		ok(t, tm.Set([]byte("c"), ms(500), ProcessingTime))
		ok(t, tm.Set([]byte("d"), ms(2500), EventTime))
		ok(t, tm.Delete([]byte("d"), ms(2500), EventTime))
		if n := must[int](t)(tm.Len()); n != 4 {
			t.Fatalf("Len = %d, want 4", n)
		}
		got := popAll(t, tm, EventTime, 2000)
		if want := "[a@01.000 b@02.000]"; fmtList(got) != want {
			t.Fatalf("due at 2000: %v, want %s", got, want)
		}
		if got := popAll(t, tm, EventTime, 2999); len(got) != 0 {
			t.Fatalf("nothing is due before 3000, got %v", got)
		}
		if at, ok3, _ := tm.Next(ProcessingTime); !ok3 || at != 500 {
			t.Fatalf("Next(processing) = %d, %v", at, ok3)
		}
		if got := popAll(t, tm, EventTime, 1<<62); fmtList(got) != "[a@03.000]" {
			t.Fatalf("the rest: %v", got)
		}
	})
}

// Timers are state: what a checkpoint registered comes back after a
// restore from the changelog, and what an aborted one did is undone, in
// the index as in the store.
func TestTimersCommitAbortAndRestore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		var l changelog
		b := bk.new(t)
		s := mustOpen(t, b, nil)
		tm := must[*Timers](t)(NewTimers(s, "t"))
		ok(t, tm.Set([]byte("k1"), ms(1000), EventTime))
		ok(t, tm.Set([]byte("k2"), ms(2000), EventTime))
		checkpoint(t, s, &l)

		// An aborted checkpoint: a timer fired and one set, both undone.
		if got := popAll(t, tm, EventTime, 1000); fmtList(got) != "[k1@01.000]" {
			t.Fatalf("%v", got)
		}
		ok(t, tm.Set([]byte("k3"), ms(500), EventTime))
		s.Changes()
		ok(t, s.Abort())
		if got := popAll(t, tm, EventTime, 1500); fmtList(got) != "[k1@01.000]" {
			t.Fatalf("after the abort the fired timer is back and the new one gone: %v", got)
		}
		checkpoint(t, s, &l)
		ok(t, s.Close())

		// A fresh store restored from the changelog has k2 only.
		s2, err := Open(NewMemory(), "agg", 3, testFP, nil)
		ok(t, err)
		defer s2.Close()
		tm2 := must[*Timers](t)(NewTimers(s2, "t"))
		restoreAll(t, s2, &l)
		if got := popAll(t, tm2, EventTime, 1<<62); fmtList(got) != "[k2@02.000]" {
			t.Fatalf("restored timers: %v", got)
		}
	})
}

func fmtList(xs []string) string {
	out := "["
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

// A timer set and fired between two checkpoints never reaches the store:
// the changelog has only the timers live at a checkpoint, and the removal
// of those that fired after it. One set and dropped by an Abort is gone,
// whether or not Changes ran first.
func TestTimersReachTheStoreAtTheCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		var l changelog
		s := mustOpen(t, bk.new(t), nil)
		tm := must[*Timers](t)(NewTimers(s, "t"))
		logged := func() int {
			n := len(l.recs)
			checkpoint(t, s, &l)
			return len(l.recs) - n
		}
		logged() // the fingerprint
		ok(t, tm.Set([]byte("gone"), ms(1000), EventTime))
		ok(t, tm.Set([]byte("kept"), ms(2000), EventTime))
		if st := s.Stats(); st.Dirty != 2 {
			t.Fatalf("Stats.Dirty = %d with two timers set, want 2", st.Dirty)
		}
		if got := popAll(t, tm, EventTime, 1000); fmtList(got) != "[gone@01.000]" {
			t.Fatalf("%v", got)
		}
		if n := logged(); n != 1 {
			t.Fatalf("the checkpoint logged %d records, want 1: the timer that fired before it leaves none", n)
		}
		ok(t, tm.Set([]byte("aborted"), ms(1500), EventTime))
		ok(t, s.Abort())
		if n := logged(); n != 0 {
			t.Fatalf("the checkpoint after an abort logged %d records, want none", n)
		}
		if got := popAll(t, tm, EventTime, 2000); fmtList(got) != "[kept@02.000]" {
			t.Fatalf("%v", got)
		}
		if n := logged(); n != 1 {
			t.Fatalf("the checkpoint logged %d records, want the fired timer's tombstone", n)
		}
		s2, err := Open(NewMemory(), "agg", 3, testFP, nil)
		ok(t, err)
		defer s2.Close()
		tm2 := must[*Timers](t)(NewTimers(s2, "t"))
		restoreAll(t, s2, &l)
		if n := must[int](t)(tm2.Len()); n != 0 {
			t.Fatalf("%d timers restored, want none", n)
		}
	})
}
