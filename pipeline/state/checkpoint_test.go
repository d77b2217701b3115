package state

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// kinds is one of each state kind in a store, for the checkpoint tests.
type kinds struct {
	v *Value[int]
	l *List[int]
	m *Map[int]
	r *Reducing[int]
}

func newKinds(t testing.TB, s *Store) kinds {
	return kinds{
		v: must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{})),
		l: must[*List[int]](t)(NewList[int](s, "l", TTLConfig{}, 4)),
		m: must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{})),
		r: must[*Reducing[int]](t)(NewReducing(s, "r", sum, TTLConfig{})),
	}
}

// model is what kinds should read.
type model struct {
	vals  map[string]int
	lists map[string][]int
	maps  map[string]map[string]int
	sums  map[string]int
}

func newModel() *model {
	return &model{vals: map[string]int{}, lists: map[string][]int{}, maps: map[string]map[string]int{}, sums: map[string]int{}}
}

func (m *model) clone() *model {
	c := &model{vals: maps.Clone(m.vals), lists: map[string][]int{}, maps: map[string]map[string]int{}, sums: maps.Clone(m.sums)}
	for k, l := range m.lists {
		c.lists[k] = slices.Clone(l)
	}
	for k, mm := range m.maps {
		c.maps[k] = maps.Clone(mm)
	}
	return c
}

var modelKeys = func() []string {
	var ks []string
	for i := range 12 {
		ks = append(ks, fmt.Sprintf("k%d", i))
	}
	return ks
}()

// read reads every key of every kind into a model.
func (k kinds) read(t testing.TB) *model {
	t.Helper()
	got := newModel()
	for _, key := range modelKeys {
		b := []byte(key)
		if v, found, err := k.v.Get(b); err != nil {
			t.Fatal(err)
		} else if found {
			got.vals[key] = v
		}
		if l, err := k.l.Get(b); err != nil {
			t.Fatal(err)
		} else if l != nil {
			got.lists[key] = l
		}
		if es, err := k.m.Entries(b); err != nil {
			t.Fatal(err)
		} else if len(es) > 0 {
			got.maps[key] = map[string]int{}
			for _, e := range es {
				got.maps[key][e.Key] = e.Value
			}
		}
		if v, found, err := k.r.Get(b); err != nil {
			t.Fatal(err)
		} else if found {
			got.sums[key] = v
		}
	}
	return got
}

func checkModel(t testing.TB, what string, k kinds, want *model) {
	t.Helper()
	if got := k.read(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// step does one random write to k and to the model.
func step(t testing.TB, rng *rand.Rand, k kinds, m *model) {
	key := modelKeys[rng.IntN(len(modelKeys))]
	b := []byte(key)
	n := rng.IntN(100)
	switch rng.IntN(9) {
	case 0, 1:
		ok(t, k.v.Put(b, n))
		m.vals[key] = n
	case 2:
		ok(t, k.v.Delete(b))
		delete(m.vals, key)
	case 3:
		ok(t, k.l.Add(b, n))
		l := append(m.lists[key], n)
		m.lists[key] = l[max(0, len(l)-4):]
	case 4:
		ok(t, k.l.Clear(b))
		delete(m.lists, key)
	case 5:
		mk := string(rune('a' + rng.IntN(4)))
		ok(t, k.m.Put(b, mk, n))
		if m.maps[key] == nil {
			m.maps[key] = map[string]int{}
		}
		m.maps[key][mk] = n
	case 6:
		mk := string(rune('a' + rng.IntN(4)))
		ok(t, k.m.Remove(b, mk))
		delete(m.maps[key], mk)
		if len(m.maps[key]) == 0 {
			delete(m.maps, key)
		}
	case 7:
		if rng.IntN(4) == 0 {
			ok(t, k.m.Clear(b))
			delete(m.maps, key)
		} else {
			ok(t, k.r.Clear(b))
			delete(m.sums, key)
		}
	case 8:
		ok(t, k.r.Add(b, n))
		m.sums[key] += n
	}
}

// TestCheckpointsMatchAModel drives a store with random writes, checkpoints
// that commit or abort, and reopens, and checks its reads against a model
// after every step; then restores the changelog into a fresh store on every
// backend and checks it reads the committed state.
func TestCheckpointsMatchAModel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		rng := rand.New(rand.NewPCG(1, uint64(len(bk.name))))
		b := bk.new(t)
		s := mustOpen(t, b, newFakeClock())
		k := newKinds(t, s)
		var l changelog
		cur, committed := newModel(), newModel()
		for i := range 3000 {
			step(t, rng, k, cur)
			if i%7 == 0 {
				checkModel(t, fmt.Sprintf("step %d", i), k, cur)
			}
			if rng.IntN(15) != 0 {
				continue
			}
			switch rng.IntN(10) {
			case 0, 1, 2: // the transaction aborts: its records are never read
				s.Changes()
				ok(t, s.Abort())
				cur = committed.clone()
			case 3: // the task moves away and back
				ok(t, s.Close())
				s = mustOpen(t, b, newFakeClock())
				k = newKinds(t, s)
				restoreAll(t, s, &l)
				cur = committed.clone()
			default:
				checkpoint(t, s, &l)
				committed = cur.clone()
			}
			checkModel(t, fmt.Sprintf("after checkpoint at step %d", i), k, cur)
		}
		checkpoint(t, s, &l)
		for _, other := range backendKinds {
			t.Run("restored into "+other.name, func(t *testing.T) {
				s2 := mustOpen(t, other.new(t), newFakeClock())
				restoreAll(t, s2, &l)
				checkModel(t, "restored", newKinds(t, s2), cur)
				if got := s2.AppliedOffset(); got != l.last() {
					t.Fatalf("AppliedOffset = %d; want %d", got, l.last())
				}
			})
		}
	})
}

func TestCheckpointProtocol(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, b Backend, s *Store, k kinds, l *changelog)
	}{
		{"abort brings back exactly the last committed state", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			key := []byte("k")
			ok(t, k.v.Put(key, 1))
			ok(t, k.l.Add(key, 1))
			ok(t, k.m.Put(key, "a", 1))
			ok(t, k.m.Put(key, "b", 2))
			ok(t, k.r.Add(key, 1))
			checkpoint(t, s, l)
			want := k.read(t)
			ok(t, k.v.Put(key, 2))
			ok(t, k.v.Put([]byte("new"), 2))
			ok(t, k.l.Add(key, 2))
			ok(t, k.m.Remove(key, "a"))
			ok(t, k.m.Put(key, "c", 3))
			ok(t, k.m.Clear([]byte("k1")))
			ok(t, k.r.Add(key, 5))
			ok(t, s.Abort())
			checkModel(t, "after abort", k, want)
			if got, _, _ := k.v.Get([]byte("new")); got != 0 {
				t.Fatalf("aborted put of new visible: %v", got)
			}
			if c := s.Changes(); len(c) != 0 {
				t.Fatalf("Changes after Abort = %v; want none", c)
			}
		}},
		{"abort after Changes drops them too", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			checkpoint(t, s, l)
			ok(t, k.v.Put([]byte("k"), 1))
			s.Changes()
			ok(t, s.Abort())
			if _, found, _ := k.v.Get([]byte("k")); found {
				t.Fatal("aborted put visible")
			}
			ok(t, k.v.Put([]byte("k"), 2))
		}},
		{"the first checkpoint carries the fingerprint and later ones do not", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			c := s.Changes()
			if len(c) != 1 || string(c[0].Key) != string(fingerprintKey) || string(c[0].Value) != testFP {
				t.Fatalf("first Changes = %v; want the fingerprint only", c)
			}
			ok(t, s.Commit(l.produce(c)))
			ok(t, k.v.Put([]byte("k"), 1))
			for _, r := range s.Changes() {
				if r.Key[0] == recMeta {
					t.Fatalf("second checkpoint has metadata record %q", r.Key)
				}
			}
		}},
		{"an aborted first checkpoint carries the fingerprint again", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			s.Changes()
			ok(t, s.Abort())
			if c := s.Changes(); len(c) != 1 || c[0].Key[0] != recMeta {
				t.Fatalf("Changes = %v; want the fingerprint", c)
			}
		}},
		{"changes after a commit hold only what changed since", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			for i := range 10 {
				ok(t, k.v.Put(fmt.Appendf(nil, "k%d", i), i))
			}
			checkpoint(t, s, l)
			ok(t, k.v.Put([]byte("k3"), 33))
			ok(t, k.v.Delete([]byte("k5")))
			ok(t, k.v.Put([]byte("k3"), 34))
			got := keysOf(t, s.Changes())
			want := []string{"v/k3=34", "v/k5=<tombstone>"}
			if !slices.Equal(got, want) {
				t.Fatalf("Changes = %q; want %q", got, want)
			}
		}},
		{"changes are sorted by key and the same on every call", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			checkpoint(t, s, l)
			for _, key := range []string{"z", "a", "m", "b"} {
				ok(t, k.v.Put([]byte(key), 1))
				ok(t, k.m.Put([]byte(key), key, 1))
			}
			c1 := s.Changes()
			c2 := s.Changes()
			if !reflect.DeepEqual(c1, c2) {
				t.Fatal("two calls to Changes differ")
			}
			if !slices.IsSortedFunc(c1, func(a, b ChangelogRecord) int { return strings.Compare(string(a.Key), string(b.Key)) }) {
				t.Fatalf("Changes not sorted: %q", keysOf(t, c1))
			}
			if len(c1) != 8 {
				t.Fatalf("%d changes; want 8", len(c1))
			}
		}},
		{"writes between Changes and Commit are refused", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			ok(t, k.v.Put([]byte("k"), 1))
			recs := s.Changes()
			for name, err := range map[string]error{
				"Value.Put":    k.v.Put([]byte("k"), 2),
				"Value.Delete": k.v.Delete([]byte("k")),
				"List.Add":     k.l.Add([]byte("k"), 2),
				"Map.Put":      k.m.Put([]byte("k"), "a", 2),
				"Map.Clear":    k.m.Clear([]byte("k")),
				"Reducing.Add": k.r.Add([]byte("k"), 2),
			} {
				if !errors.Is(err, ErrSealed) {
					t.Errorf("%s between Changes and Commit: %v; want ErrSealed", name, err)
				}
			}
			if _, err := s.Expire(s.clock.Now(), 10); !errors.Is(err, ErrSealed) {
				t.Errorf("Expire between Changes and Commit: %v; want ErrSealed", err)
			}
			ok(t, s.Commit(l.produce(recs)))
			ok(t, k.v.Put([]byte("k"), 3))
		}},
		{"commit without Changes is refused", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			checkpoint(t, s, l)
			ok(t, k.v.Put([]byte("k"), 1))
			if err := s.Commit(7); err == nil {
				t.Fatal("Commit without Changes accepted")
			}
		}},
		{"commit with no changes keeps the applied offset", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			ok(t, k.v.Put([]byte("k"), 1))
			checkpoint(t, s, l)
			applied := s.AppliedOffset()
			if applied != l.last() {
				t.Fatalf("AppliedOffset = %d; want %d", applied, l.last())
			}
			if c := s.Changes(); len(c) != 0 {
				t.Fatalf("Changes = %v; want none", c)
			}
			ok(t, s.Commit(-1))
			ok(t, s.Commit(-1))
			if got := s.AppliedOffset(); got != applied {
				t.Fatalf("AppliedOffset = %d; want %d", got, applied)
			}
		}},
		{"restore with uncommitted changes is refused", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			ok(t, k.v.Put([]byte("k"), 1))
			if err := s.Restore(nil, 5); err == nil {
				t.Fatal("Restore with uncommitted changes accepted")
			}
		}},
		{"a closed store refuses work", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			ok(t, s.Close())
			ok(t, s.Close())
			if err := s.Commit(1); !errors.Is(err, ErrClosed) {
				t.Fatalf("Commit after Close: %v", err)
			}
			if err := k.v.Put([]byte("k"), 1); !errors.Is(err, ErrClosed) {
				t.Fatalf("Put after Close: %v", err)
			}
		}},
		{"a store cannot be opened twice at once", func(t *testing.T, b Backend, s *Store, k kinds, l *changelog) {
			if _, err := Open(b, "agg", 3, testFP, nil); !errors.Is(err, ErrInUse) {
				t.Fatalf("second Open: %v; want ErrInUse", err)
			}
			if err := Reset(b, "agg", 3); !errors.Is(err, ErrInUse) {
				t.Fatalf("Reset of an open store: %v; want ErrInUse", err)
			}
			if err := b.Close(); !errors.Is(err, ErrInUse) {
				t.Fatalf("closing the backend with a store open: %v; want ErrInUse", err)
			}
			ok(t, s.Close())
			s2 := must[*Store](t)(Open(b, "agg", 3, testFP, nil))
			ok(t, s2.Close())
		}},
	}
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				b := bk.new(t)
				s := mustOpen(t, b, newFakeClock())
				var l changelog
				c.run(t, b, s, newKinds(t, s), &l)
			})
		}
	})
}

// keysOf renders records as state/key=value for value states of ints.
func keysOf(t testing.TB, recs []ChangelogRecord) []string {
	var out []string
	for _, r := range recs {
		rk, err := parseKey(r.Key)
		if err != nil {
			t.Fatal(err)
		}
		v := "<tombstone>"
		if r.Value != nil {
			_, p, err := parseValue(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			v = string(p)
		}
		out = append(out, fmt.Sprintf("%s/%s=%s", rk.state, rk.key, v))
	}
	return out
}

// TestNoTombstoneForWhatWasNeverCommitted: with the memory backend, a key
// written and deleted again between two commits leaves nothing in the
// changelog (a join's buffered record, a timer that fired); a committed key
// deleted leaves its tombstone. A restore reads the same state either way.
func TestNoTombstoneForWhatWasNeverCommitted(t *testing.T) {
	s := mustOpen(t, NewMemory(), nil)
	m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
	var l changelog
	checkpoint(t, s, &l) // the fingerprint
	k := []byte("k")
	ok(t, m.Put(k, "kept", 1))
	ok(t, m.Put(k, "gone", 2))
	checkpoint(t, s, &l)
	ok(t, m.Remove(k, "gone")) // committed: a tombstone
	ok(t, m.Put(k, "brief", 3))
	ok(t, m.Remove(k, "brief")) // never committed: nothing
	ok(t, m.Remove(k, "never")) // never written: nothing
	c := s.Changes()
	if len(c) != 1 || c[0].Value != nil || !strings.HasSuffix(string(c[0].Key), "gone") {
		t.Fatalf("Changes = %+v; want the tombstone of gone alone", c)
	}
	ok(t, s.Commit(l.produce(c)))

	r := mustOpen(t, NewMemory(), nil)
	rm := must[*Map[int]](t)(NewMap[int](r, "m", TTLConfig{}))
	restoreAll(t, r, &l)
	es := must[[]MapEntry[int]](t)(rm.Entries(k))
	if len(es) != 1 || es[0].Key != "kept" || es[0].Value != 1 {
		t.Fatalf("restored entries %v; want kept=1 alone", es)
	}
}
