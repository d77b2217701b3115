package state

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// openTask opens the store of one task of a step with an operator list
// and a union list registered, as the step's operator would.
func openTask(t *testing.T, b Backend, task, tasks int32) (*Store, *OperatorList[string], *OperatorList[string]) {
	t.Helper()
	s, err := Open(b, "buffer", task, testFP, nil)
	ok(t, err)
	t.Cleanup(func() { _ = s.Close() })
	s.SetTaskCount(tasks)
	l := must[*OperatorList[string]](t)(NewOperatorList[string](s, "pending"))
	u := must[*OperatorList[string]](t)(NewUnionList[string](s, "seen"))
	return s, l, u
}

func TestOperatorListRidesTheCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		var log changelog
		s, l, _ := openTask(t, bk.new(t), 0, 3)
		ok(t, l.Add("a"))
		ok(t, l.Add("b"))
		checkpoint(t, s, &log)
		ok(t, l.Add("c")) // aborted below
		if got := must[[]string](t)(l.Get()); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("before the abort: %q", got)
		}
		ok(t, s.Abort())
		if got := must[[]string](t)(l.Get()); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("after the abort: %q, want the committed [a b]", got)
		}
		ok(t, l.Update([]string{"x", "y", "z"}))
		checkpoint(t, s, &log)

		// A fresh store restored from the changelog has the list back.
		r, rl, ru := openTask(t, NewMemory(), 0, 3)
		restoreAll(t, r, &log)
		if got := must[[]string](t)(rl.Get()); !slices.Equal(got, []string{"x", "y", "z"}) {
			t.Fatalf("restored: %q", got)
		}
		if got := must[[]string](t)(ru.Get()); got != nil {
			t.Fatalf("the union list was never written, restored %q", got)
		}
		ok(t, rl.Clear())
		checkpoint(t, r, &log)
		again, al, _ := openTask(t, NewMemory(), 0, 3)
		restoreAll(t, again, &log)
		if got := must[[]string](t)(al.Get()); got != nil {
			t.Fatalf("cleared, then restored: %q", got)
		}
	})
}

func TestOperatorStateOfAnotherTaskCountIsRefused(t *testing.T) {
	var log changelog
	s, l, _ := openTask(t, NewMemory(), 1, 3)
	ok(t, l.Add("a"))
	checkpoint(t, s, &log)
	r, rl, _ := openTask(t, NewMemory(), 1, 4)
	restoreAll(t, r, &log)
	if got := must[[]int32](t)(OperatorLayouts(r)); !slices.Equal(got, []int32{3}) {
		t.Fatalf("layouts %v, want [3]", got)
	}
	_, err := rl.Get()
	if err == nil || !strings.Contains(err.Error(), "ran 3 tasks, and it now runs 4") {
		t.Fatalf("reading state of 3 tasks in a step of 4: %v", err)
	}
}

// TestRedistribute moves the lists of 3 tasks to 1, 2, 4 and 7 tasks. The
// oracle is written out by hand: list state split in contiguous parts in
// task order, union state whole everywhere.
func TestRedistribute(t *testing.T) {
	oldLists := [][]string{{"a", "b"}, {"c"}, {"d", "e", "f", "g"}}
	all := []string{"a", "b", "c", "d", "e", "f", "g"}
	want := map[int][][]string{
		1: {all},
		2: {{"a", "b", "c"}, {"d", "e", "f", "g"}},
		4: {{"a"}, {"b", "c"}, {"d", "e"}, {"f", "g"}},
		7: {{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}, {"g"}},
	}
	for _, n := range []int{1, 2, 4, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var old []*Store
			for i, xs := range oldLists {
				s, l, u := openTask(t, NewMemory(), int32(i), 3)
				ok(t, l.Update(xs))
				ok(t, u.Update(xs))
				var log changelog
				checkpoint(t, s, &log)
				// The old stores as the runtime has them: restored from
				// their changelogs, not knowing the old task count.
				r, _, _ := openTask(t, NewMemory(), int32(i), 0)
				restoreAll(t, r, &log)
				old = append(old, r)
			}
			var logs []changelog
			var news []*Store
			for i := range n {
				s, _, _ := openTask(t, NewMemory(), int32(i), int32(n))
				news = append(news, s)
			}
			ok(t, Redistribute(old, news))
			logs = make([]changelog, n)
			for i, s := range news {
				checkpoint(t, s, &logs[i])
				// Every new task's changelog has both states, empty or
				// not, with the new task count.
				var values int
				for _, r := range logs[i].recs {
					if r.Key[0] == recData {
						values++
					}
				}
				if values != 2 {
					t.Fatalf("task %d wrote %d state values, want 2 (both lists, empty or not)", i, values)
				}
			}
			for i := range n {
				r, l, u := openTask(t, NewMemory(), int32(i), int32(n))
				restoreAll(t, r, &logs[i])
				if got := must[[]int32](t)(OperatorLayouts(r)); !slices.Equal(got, []int32{int32(n)}) {
					t.Fatalf("task %d: layouts %v, want [%d]", i, got, n)
				}
				if got := must[[]string](t)(l.Get()); !slices.Equal(got, want[n][i]) {
					t.Errorf("task %d of %d: list %q, want %q", i, n, got, want[n][i])
				}
				if got := must[[]string](t)(u.Get()); !slices.Equal(got, all) {
					t.Errorf("task %d of %d: union list %q, want %q", i, n, got, all)
				}
			}
		})
	}
}

func TestRedistributeRefusesKeyedState(t *testing.T) {
	old, _, _ := openTask(t, NewMemory(), 0, 1)
	s, _, _ := openTask(t, NewMemory(), 0, 2)
	_ = must[*Value[int]](t)(NewValue[int](s, "count", TTLConfig{}))
	if got := KeyedStates(s); !slices.Equal(got, []string{"count (value)"}) {
		t.Fatalf("KeyedStates = %q", got)
	}
	err := Redistribute([]*Store{old}, []*Store{s})
	if err == nil || !strings.Contains(err.Error(), "count (value)") {
		t.Fatalf("redistributing a store with keyed state: %v", err)
	}
}
