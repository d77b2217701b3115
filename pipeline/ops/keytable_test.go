package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeyTableAgainstAMap puts, finds and misses keys in a keyTable
// and a Go map side by side, across growths and resets (one after a burst
// of keys, which drops the slots): both always agree, and each visits
// every entry once.
func TestKeyTableAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tab, want := newKeyTable[aggEntry](), map[string]*aggEntry{}
	check := func(round int) {
		t.Helper()
		if tab.len() != len(want) {
			t.Fatalf("round %d: len %d; want %d", round, tab.len(), len(want))
		}
		seen := map[string]bool{}
		_ = tab.each(func(e *aggEntry) error {
			if seen[e.key] || want[e.key] != e {
				t.Fatalf("round %d: each visits %q twice or not as put", round, e.key)
			}
			seen[e.key] = true
			return nil
		})
		if len(seen) != len(want) {
			t.Fatalf("round %d: each visited %d entries; want %d", round, len(seen), len(want))
		}
	}
	for round, keys := range []int{10, 1000, 5, 20000, 3000, 0, 70} {
		for range 3 * keys {
			k := fmt.Appendf(nil, "k%d", rng.IntN(2*keys+1))
			got, h := tab.get(k)
			if got != want[string(k)] {
				t.Fatalf("round %d: get(%s) = %v; want %v", round, k, got, want[string(k)])
			}
			if got == nil {
				e := newAggEntry(k, 1)
				tab.put(h, e.key, e)
				want[e.key] = e
			}
		}
		check(round)
		if n := tab.len(); 4*n > 3*len(tab.slots) {
			t.Fatalf("round %d: %d entries in %d slots", round, n, len(tab.slots))
		}
		tab.reset()
		clear(want)
		check(round)
		if e, _ := tab.get([]byte("k1")); e != nil {
			t.Fatalf("round %d: a key found after reset", round)
		}
	}
}
