package state

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestMemTableAgreesWithAMap runs random batches of writes and deletes
// through a memory table and through a Go map (the batches' bytes are
// overwritten after each commit, which must have copied them): values
// of every length from one byte past one arena block's share, with and
// without an expiry, keys of value and map states. After every batch
// each key of the key space reads back as the map has it, a value read
// before the batch is unchanged, the map groups scan to their entries,
// and the expiry heap hands out the due entries by (expiry, key), again
// after a rollback. The index grows, deletes move entries back, and the
// arena compacts: the test checks that each of them happened.
func TestMemTableAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 19))
	tab := newMemTable(NewMemory())
	model := map[string][]byte{}
	const space = 3000
	vp, mp := statePrefix("v"), statePrefix("m")
	key := func(i int) []byte {
		if i%4 == 0 {
			g := appendGroup(nil, mp, fmt.Appendf(nil, "g%d", i%7), subMap)
			return fmt.Appendf(g, "e%d", i)
		}
		return appendGroup(nil, vp, fmt.Appendf(nil, "k%d", i), subNone)
	}
	value := func() []byte {
		var exp int64
		if rng.IntN(3) == 0 {
			exp = 1 + rng.Int64N(1000)
		}
		n := rng.IntN(300)
		if rng.IntN(50) == 0 {
			n = ownBlock + rng.IntN(ownBlock)
		}
		v := appendHeader(nil, exp)
		for range n {
			v = append(v, byte('a'+rng.IntN(26)))
		}
		return v
	}
	var big, unslotMoves, maxSlots int
	for round := range 400 {
		// A value read before the batch, to check it does not change.
		var kept, keptWas []byte
		for k, v := range model {
			got, found, err := tab.get([]byte(k))
			if err != nil || !found || !bytes.Equal(got, v) {
				t.Fatalf("round %d: key %q reads %q, %v, %v; want %q", round, k, got, found, err, v)
			}
			kept, keptWas = got, bytes.Clone(got)
			break
		}
		var ws []write
		for range rng.IntN(300) {
			k := key(rng.IntN(space))
			var v []byte
			if rng.IntN(10) >= 3 {
				v = value()
				if len(v) > ownBlock {
					big++
				}
			}
			ws = append(ws, write{key: k, val: v, prev: -1})
		}
		ok(t, tab.commit(ws, int64(round), ""))
		for _, w := range ws {
			if w.val == nil {
				delete(model, string(w.key))
			} else {
				model[string(w.key)] = bytes.Clone(w.val)
			}
			// The table keeps copies.
			for i := range w.val {
				w.val[i] = 0xff
			}
			for i := range w.key {
				w.key[i] = 0xff
			}
		}
		if kept != nil && !bytes.Equal(kept, keptWas) {
			t.Fatalf("round %d: a value read before the batch changed", round)
		}
		for i := range space {
			k := key(i)
			want, live := model[string(k)]
			got, found, err := tab.get(k)
			ok(t, err)
			if found != live || !bytes.Equal(got, want) {
				t.Fatalf("round %d: key %q reads %q, %v; want %q, %v", round, k, got, found, want, live)
			}
			if found && got == nil {
				t.Fatalf("round %d: key %q reads nil", round, k)
			}
		}
		if st := tab.stats(); st.keys != int64(len(model)) {
			t.Fatalf("round %d: %d keys counted, the map has %d", round, st.keys, len(model))
		}
		maxSlots = max(maxSlots, len(tab.slots))
		unslotMoves += displaced(tab)
		checkGroups(t, tab, model, mp)
		if round%10 == 9 {
			checkExpiry(t, tab, model, int64(rng.IntN(1100)))
		}
	}
	if tab.compactions == 0 || big == 0 || maxSlots <= 8 || unslotMoves == 0 {
		t.Fatalf("compactions %d, big values %d, most slots %d, entries off their home slot %d: each should be > 0 (8 for slots)", tab.compactions, big, maxSlots, unslotMoves)
	}
}

// displaced counts the entries of the index not in their home slot.
func displaced(tab *memTable) int {
	n := 0
	mask := uint32(len(tab.slots) - 1)
	for i, s := range tab.slots {
		if s != 0 && uint32(s>>32)&mask != uint32(i) {
			n++
		}
	}
	return n
}

// checkGroups checks that every map group scans to the model's entries
// of that group.
func checkGroups(t *testing.T, tab *memTable, model map[string][]byte, mp []byte) {
	t.Helper()
	for g := range 7 {
		group := appendGroup(nil, mp, fmt.Appendf(nil, "g%d", g), subMap)
		want := map[string]string{}
		for k, v := range model {
			if bytes.HasPrefix([]byte(k), group) {
				want[k] = string(v)
			}
		}
		got := map[string]string{}
		ok(t, tab.scanGroup(group, func(k, v []byte) error {
			got[string(k)] = string(v)
			return nil
		}))
		if len(got) != len(want) {
			t.Fatalf("group %d scans %d entries, want %d", g, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("group %d: entry %q scans %q, want %q", g, k, got[k], v)
			}
		}
	}
}

// checkExpiry checks that expire hands out the entries due at now by
// (expiry, key), the same again after a rollback.
func checkExpiry(t *testing.T, tab *memTable, model map[string][]byte, now int64) {
	t.Helper()
	type due struct {
		exp int64
		key string
	}
	var want []due
	for k, v := range model {
		if exp := valueExp(v); exp > 0 && exp <= now {
			want = append(want, due{exp, k})
		}
	}
	slices.SortFunc(want, func(a, b due) int {
		return cmp.Or(cmp.Compare(a.exp, b.exp), cmp.Compare(a.key, b.key))
	})
	for pass := range 2 {
		var got []due
		ok(t, tab.expire(now, len(model)+1, func(exp int64, k []byte) {
			got = append(got, due{exp, string(k)})
		}))
		if !slices.Equal(got, want) {
			t.Fatalf("expire(%d), pass %d: %d entries, want %d (%v ≠ %v)", now, pass, len(got), len(want), head(got), head(want))
		}
		tab.rollback()
	}
}

func head[T any](s []T) []T { return s[:min(len(s), 3)] }

// TestMemTableIndexHoldsNoPointers checks that what the memory table
// keeps per key, its entries and index slots, has no pointer in it: the
// collector skips such memory rather than marking every key of every
// table at every collection.
func TestMemTableIndexHoldsNoPointers(t *testing.T) {
	tab := newMemTable(NewMemory())
	for _, ty := range []reflect.Type{reflect.TypeOf(tab.entries).Elem(), reflect.TypeOf(tab.slots).Elem(), reflect.TypeOf(tab.heap).Elem()} {
		if p := pointerIn(ty); p != "" {
			t.Errorf("%s holds a pointer: %s", ty, p)
		}
	}
}

// pointerIn names a field of ty that is or holds a pointer, "" if none.
func pointerIn(ty reflect.Type) string {
	switch ty.Kind() {
	case reflect.Struct:
		for i := range ty.NumField() {
			f := ty.Field(i)
			if p := pointerIn(f.Type); p != "" {
				return f.Name + "." + p
			}
		}
		return ""
	case reflect.Array:
		return pointerIn(ty.Elem())
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	}
	return ty.Kind().String()
}
