package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"testing"
)

// kindCase is one behaviour of a state kind. cp commits a checkpoint, or
// does nothing: every case runs both ways, so reads are checked from the
// uncommitted overlay and from the committed backend.
type kindCase struct {
	name string
	run  func(t *testing.T, s *Store, cp func())
}

func runKindCases(t *testing.T, cases []kindCase) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		for _, mode := range []string{"uncommitted", "committed between steps"} {
			t.Run(mode, func(t *testing.T) {
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						s := mustOpen(t, bk.new(t), newFakeClock())
						var l changelog
						cp := func() {}
						if mode != "uncommitted" {
							cp = func() { checkpoint(t, s, &l) }
						}
						c.run(t, s, cp)
					})
				}
			})
		}
	})
}

func wantValue[T any](t *testing.T, v *Value[T], key string, want T, wantOK bool) {
	t.Helper()
	got, found, err := v.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if found != wantOK || !reflect.DeepEqual(got, want) {
		t.Fatalf("Get(%q) = %v, %v; want %v, %v", key, got, found, want, wantOK)
	}
}

func TestValue(t *testing.T) {
	runKindCases(t, []kindCase{
		{"a key never written has no value", func(t *testing.T, s *Store, cp func()) {
			v := must[*Value[string]](t)(NewValue[string](s, "v", TTLConfig{}))
			cp()
			wantValue(t, v, "k", "", false)
		}},
		{"a put value is read back", func(t *testing.T, s *Store, cp func()) {
			v := must[*Value[string]](t)(NewValue[string](s, "v", TTLConfig{}))
			ok(t, v.Put([]byte("k"), "hello"))
			cp()
			wantValue(t, v, "k", "hello", true)
		}},
		{"a second put replaces the first", func(t *testing.T, s *Store, cp func()) {
			v := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
			ok(t, v.Put([]byte("k"), 1))
			cp()
			ok(t, v.Put([]byte("k"), 2))
			cp()
			wantValue(t, v, "k", 2, true)
		}},
		{"a deleted value is gone and can be written again", func(t *testing.T, s *Store, cp func()) {
			v := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
			ok(t, v.Put([]byte("k"), 1))
			cp()
			ok(t, v.Delete([]byte("k")))
			cp()
			wantValue(t, v, "k", 0, false)
			ok(t, v.Put([]byte("k"), 3))
			cp()
			wantValue(t, v, "k", 3, true)
		}},
		{"two states with the same key do not collide", func(t *testing.T, s *Store, cp func()) {
			a := must[*Value[string]](t)(NewValue[string](s, "a", TTLConfig{}))
			b := must[*Value[string]](t)(NewValue[string](s, "b", TTLConfig{}))
			ok(t, a.Put([]byte("k"), "from a"))
			ok(t, b.Put([]byte("k"), "from b"))
			cp()
			wantValue(t, a, "k", "from a", true)
			wantValue(t, b, "k", "from b", true)
		}},
		{"empty and binary keys are distinct keys", func(t *testing.T, s *Store, cp func()) {
			v := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
			keys := []string{"", "\x00", "\x00\x00", "\xff", "k\x00", "k"}
			for i, k := range keys {
				ok(t, v.Put([]byte(k), i))
			}
			cp()
			for i, k := range keys {
				wantValue(t, v, k, i, true)
			}
		}},
		{"a value of any type goes through JSON", func(t *testing.T, s *Store, cp func()) {
			v := must[*Value[any]](t)(NewValue[any](s, "v", TTLConfig{}))
			ok(t, v.Put([]byte("k"), map[string]any{"n": 1.5, "s": "x", "l": []any{true}}))
			cp()
			wantValue[any](t, v, "k", map[string]any{"n": 1.5, "s": "x", "l": []any{true}}, true)
		}},
		{"a custom codec encodes the values", func(t *testing.T, s *Store, cp func()) {
			v := must[*Value[uint64]](t)(NewValue(s, "v", TTLConfig{}, WithCodec[uint64](u64Codec{})))
			ok(t, v.Put([]byte("k"), 1<<60))
			cp()
			wantValue(t, v, "k", uint64(1<<60), true)
		}},
		{"registering a state name twice fails", func(t *testing.T, s *Store, cp func()) {
			must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
			if _, err := NewList[int](s, "v", TTLConfig{}, 0); err == nil {
				t.Fatal("second registration of v accepted")
			}
		}},
		{"a negative TTL is refused", func(t *testing.T, s *Store, cp func()) {
			if _, err := NewValue[int](s, "v", TTLConfig{TTL: -1}); err == nil {
				t.Fatal("negative TTL accepted")
			}
		}},
	})
}

type u64Codec struct{}

func (u64Codec) Append(dst []byte, v uint64) ([]byte, error) {
	return binary.AppendUvarint(dst, v), nil
}
func (u64Codec) Decode(src []byte) (uint64, error) {
	v, n := binary.Uvarint(src)
	if n <= 0 {
		return 0, errors.New("bad uvarint")
	}
	return v, nil
}

func wantList[T any](t *testing.T, l *List[T], key string, want []T) {
	t.Helper()
	got, err := l.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Get(%q) = %v; want %v", key, got, want)
	}
}

func TestList(t *testing.T) {
	runKindCases(t, []kindCase{
		{"a key never written has no list", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[int]](t)(NewList[int](s, "l", TTLConfig{}, 0))
			cp()
			wantList(t, l, "k", nil)
		}},
		{"added elements come back in order", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[int]](t)(NewList[int](s, "l", TTLConfig{}, 0))
			ok(t, l.Add([]byte("k"), 1))
			ok(t, l.Add([]byte("k"), 2))
			cp()
			ok(t, l.Add([]byte("k"), 3))
			cp()
			wantList(t, l, "k", []int{1, 2, 3})
		}},
		{"update replaces the list", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[string]](t)(NewList[string](s, "l", TTLConfig{}, 0))
			ok(t, l.Add([]byte("k"), "a"))
			cp()
			ok(t, l.Update([]byte("k"), []string{"x", "y"}))
			cp()
			wantList(t, l, "k", []string{"x", "y"})
		}},
		{"update with no elements clears the list", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[string]](t)(NewList[string](s, "l", TTLConfig{}, 0))
			ok(t, l.Add([]byte("k"), "a"))
			cp()
			ok(t, l.Update([]byte("k"), nil))
			cp()
			wantList(t, l, "k", nil)
		}},
		{"clear removes the list", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[int]](t)(NewList[int](s, "l", TTLConfig{}, 0))
			ok(t, l.Add([]byte("k"), 1))
			cp()
			ok(t, l.Clear([]byte("k")))
			cp()
			wantList(t, l, "k", nil)
			ok(t, l.Add([]byte("k"), 2))
			cp()
			wantList(t, l, "k", []int{2})
		}},
		{"a bounded list keeps the newest elements", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[int]](t)(NewList[int](s, "l", TTLConfig{}, 3))
			for i := range 5 {
				ok(t, l.Add([]byte("k"), i))
				if i == 2 {
					cp()
				}
			}
			cp()
			wantList(t, l, "k", []int{2, 3, 4})
		}},
		{"an update beyond the bound keeps the newest elements", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[int]](t)(NewList[int](s, "l", TTLConfig{}, 2))
			ok(t, l.Update([]byte("k"), []int{1, 2, 3, 4}))
			cp()
			wantList(t, l, "k", []int{3, 4})
		}},
		{"lists of different keys are separate", func(t *testing.T, s *Store, cp func()) {
			l := must[*List[int]](t)(NewList[int](s, "l", TTLConfig{}, 0))
			ok(t, l.Add([]byte("a"), 1))
			ok(t, l.Add([]byte("ab"), 2))
			cp()
			wantList(t, l, "a", []int{1})
			wantList(t, l, "ab", []int{2})
		}},
	})
}

// wantEntries checks key's map, and that Entries returns it sorted.
func wantEntries[T any](t *testing.T, m *Map[T], key string, want map[string]T) {
	t.Helper()
	entries, err := m.Entries([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]T{}
	for i, e := range entries {
		if i > 0 && entries[i-1].Key >= e.Key {
			t.Fatalf("Entries(%q) not sorted: %v", key, entries)
		}
		got[e.Key] = e.Value
	}
	if !maps.EqualFunc(got, want, func(a, b T) bool { return reflect.DeepEqual(a, b) }) {
		t.Fatalf("Entries(%q) = %v; want %v", key, got, want)
	}
}

func TestMap(t *testing.T) {
	runKindCases(t, []kindCase{
		{"a key never written has an empty map", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			cp()
			if _, found, err := m.Get([]byte("k"), "x"); found || err != nil {
				t.Fatalf("Get = %v, %v", found, err)
			}
			wantEntries(t, m, "k", map[string]int{})
		}},
		{"put entries come back by map key and in Entries", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			ok(t, m.Put([]byte("k"), "x", 1))
			cp()
			ok(t, m.Put([]byte("k"), "y", 2))
			ok(t, m.Put([]byte("k"), "", 3))
			cp()
			got, found, err := m.Get([]byte("k"), "y")
			if err != nil || !found || got != 2 {
				t.Fatalf("Get(k, y) = %v, %v, %v", got, found, err)
			}
			wantEntries(t, m, "k", map[string]int{"x": 1, "y": 2, "": 3})
		}},
		{"an entry changed since the commit shadows the committed one", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			ok(t, m.Put([]byte("k"), "x", 1))
			ok(t, m.Put([]byte("k"), "y", 1))
			cp()
			ok(t, m.Put([]byte("k"), "x", 10))
			wantEntries(t, m, "k", map[string]int{"x": 10, "y": 1})
		}},
		{"EntriesExcept leaves out what skip names, committed or changed", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			for i, mk := range []string{"", "a", "b", "c", "d"} {
				ok(t, m.Put([]byte("k"), mk, i))
			}
			cp()
			ok(t, m.Put([]byte("k"), "b", 20)) // changed since the commit
			ok(t, m.Put([]byte("k"), "e", 5))  // new since
			skipped := map[string]bool{}
			es, err := m.EntriesExcept([]byte("k"), func(mk string) bool {
				skipped[mk] = true
				return mk == "" || mk == "c" || mk == "e"
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(es); got != "[{a 1} {b 20} {d 4}]" {
				t.Fatalf("EntriesExcept = %s; want [{a 1} {b 20} {d 4}]", got)
			}
			if len(skipped) != 6 {
				t.Fatalf("skip saw %v; want every entry's map key once", skipped)
			}
			wantEntries(t, m, "k", map[string]int{"": 0, "a": 1, "b": 20, "c": 3, "d": 4, "e": 5})
		}},
		{"remove deletes one entry", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			ok(t, m.Put([]byte("k"), "x", 1))
			ok(t, m.Put([]byte("k"), "y", 2))
			cp()
			ok(t, m.Remove([]byte("k"), "x"))
			cp()
			wantEntries(t, m, "k", map[string]int{"y": 2})
		}},
		{"clear removes every entry, committed or not", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			ok(t, m.Put([]byte("k"), "x", 1))
			cp()
			ok(t, m.Put([]byte("k"), "y", 2))
			ok(t, m.Put([]byte("other"), "x", 3))
			ok(t, m.Clear([]byte("k")))
			cp()
			wantEntries(t, m, "k", map[string]int{})
			wantEntries(t, m, "other", map[string]int{"x": 3})
		}},
		{"maps of keys that prefix each other are separate", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			ok(t, m.Put([]byte("a"), "b", 1))
			ok(t, m.Put([]byte("ab"), "", 2))
			ok(t, m.Put([]byte("a\x01"), "x", 3))
			cp()
			wantEntries(t, m, "a", map[string]int{"b": 1})
			wantEntries(t, m, "ab", map[string]int{"": 2})
			wantEntries(t, m, "a\x01", map[string]int{"x": 3})
		}},
		{"a map and a value with the same key do not collide", func(t *testing.T, s *Store, cp func()) {
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			v := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
			ok(t, m.Put([]byte("k"), "", 1))
			ok(t, v.Put([]byte("k"), 2))
			cp()
			wantEntries(t, m, "k", map[string]int{"": 1})
			wantValue(t, v, "k", 2, true)
		}},
	})
}

func sum(acc, v int) (int, error) { return acc + v, nil }

type countSum struct {
	Count int64
	Sum   float64
}

// avg is an Aggregator: the mean of the inputs, with count and sum as its
// accumulator.
type avg struct{}

func (avg) Init() countSum { return countSum{} }
func (avg) Add(acc countSum, in float64) (countSum, error) {
	if in < 0 {
		return acc, fmt.Errorf("negative input %v", in)
	}
	return countSum{acc.Count + 1, acc.Sum + in}, nil
}
func (avg) Result(acc countSum) (float64, error) { return acc.Sum / float64(acc.Count), nil }

func TestReducingAndAggregating(t *testing.T) {
	runKindCases(t, []kindCase{
		{"a reducing state keeps the first value, then reduces", func(t *testing.T, s *Store, cp func()) {
			r := must[*Reducing[int]](t)(NewReducing(s, "r", sum, TTLConfig{}))
			if _, found, _ := r.Get([]byte("k")); found {
				t.Fatal("value before any Add")
			}
			ok(t, r.Add([]byte("k"), 5))
			cp()
			ok(t, r.Add([]byte("k"), 7))
			ok(t, r.Add([]byte("k"), 1))
			cp()
			got, found, err := r.Get([]byte("k"))
			if err != nil || !found || got != 13 {
				t.Fatalf("Get = %v, %v, %v; want 13", got, found, err)
			}
		}},
		{"a reduce error leaves the state unchanged", func(t *testing.T, s *Store, cp func()) {
			boom := errors.New("boom")
			r := must[*Reducing[int]](t)(NewReducing(s, "r", func(acc, v int) (int, error) {
				if v < 0 {
					return 0, boom
				}
				return acc + v, nil
			}, TTLConfig{}))
			ok(t, r.Add([]byte("k"), 5))
			cp()
			ok(t, r.Add([]byte("k"), 1))
			if err := r.Add([]byte("k"), -1); !errors.Is(err, boom) {
				t.Fatalf("Add = %v; want boom", err)
			}
			cp()
			if got, _, _ := r.Get([]byte("k")); got != 6 {
				t.Fatalf("Get = %v; want 6", got)
			}
		}},
		{"a cleared reducing state starts again", func(t *testing.T, s *Store, cp func()) {
			r := must[*Reducing[int]](t)(NewReducing(s, "r", sum, TTLConfig{}))
			ok(t, r.Add([]byte("k"), 5))
			cp()
			ok(t, r.Clear([]byte("k")))
			ok(t, r.Add([]byte("k"), 2))
			cp()
			if got, _, _ := r.Get([]byte("k")); got != 2 {
				t.Fatalf("Get = %v; want 2", got)
			}
		}},
		{"an aggregating state returns the result of its accumulator", func(t *testing.T, s *Store, cp func()) {
			a := must[*Aggregating[float64, countSum, float64]](t)(NewAggregating(s, "a", avg{}, TTLConfig{}))
			if _, found, _ := a.Get([]byte("k")); found {
				t.Fatal("result before any Add")
			}
			ok(t, a.Add([]byte("k"), 1))
			cp()
			ok(t, a.Add([]byte("k"), 2))
			ok(t, a.Add([]byte("k"), 6))
			cp()
			got, found, err := a.Get([]byte("k"))
			if err != nil || !found || got != 3 {
				t.Fatalf("Get = %v, %v, %v; want 3", got, found, err)
			}
		}},
		{"an aggregator error leaves the state unchanged", func(t *testing.T, s *Store, cp func()) {
			a := must[*Aggregating[float64, countSum, float64]](t)(NewAggregating(s, "a", avg{}, TTLConfig{}))
			ok(t, a.Add([]byte("k"), 4))
			cp()
			if err := a.Add([]byte("k"), -1); err == nil {
				t.Fatal("Add(-1) succeeded")
			}
			cp()
			if got, _, _ := a.Get([]byte("k")); got != 4 {
				t.Fatalf("Get = %v; want 4", got)
			}
		}},
		{"a cleared aggregating state has no result", func(t *testing.T, s *Store, cp func()) {
			a := must[*Aggregating[float64, countSum, float64]](t)(NewAggregating(s, "a", avg{}, TTLConfig{}))
			ok(t, a.Add([]byte("k"), 4))
			cp()
			ok(t, a.Clear([]byte("k")))
			cp()
			if _, found, _ := a.Get([]byte("k")); found {
				t.Fatal("result after Clear")
			}
		}},
	})
}
