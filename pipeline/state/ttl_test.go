package state

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

const ttl = 10 * time.Second

func TestTTL(t *testing.T) {
	type env struct {
		s     *Store
		clock *fakeClock
		l     *changelog
		b     Backend
		cp    func()
	}
	cases := []struct {
		name string
		run  func(t *testing.T, e env)
	}{
		{"a value is visible before its expiry and never after", func(t *testing.T, e env) {
			for _, u := range []TTLUpdate{OnCreateAndWrite, OnReadAndWrite} {
				v := must[*Value[int]](t)(NewValue[int](e.s, "v"+u.String(), TTLConfig{TTL: ttl, Update: u}))
				ok(t, v.Put([]byte("k"), 1))
			}
			e.cp()
			e.clock.Advance(ttl - time.Nanosecond)
			for _, u := range []TTLUpdate{OnCreateAndWrite, OnReadAndWrite} {
				v := must[*Value[int]](t)(NewValue[int](e.s, "w"+u.String(), TTLConfig{TTL: ttl, Update: u}))
				ok(t, v.Put([]byte("k"), 2))
			}
			e.cp()
			e.clock.Advance(time.Nanosecond)
			for _, name := range []string{"v", "w"} {
				for _, u := range []TTLUpdate{OnCreateAndWrite, OnReadAndWrite} {
					v := e.s.states[name+u.String()]
					_, found, err := get(e.s, v, Codec[int](JSON[int]{}), []byte("k"))
					ok(t, err)
					if want := name == "w"; found != want {
						t.Errorf("%s %v: found = %v at %v; want %v", name, u, found, ttl, want)
					}
				}
			}
		}},
		{"a write refreshes the expiry", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			ok(t, v.Put([]byte("k"), 1))
			e.cp()
			e.clock.Advance(6 * time.Second)
			ok(t, v.Put([]byte("k"), 2))
			e.cp()
			e.clock.Advance(6 * time.Second)
			wantValue(t, v, "k", 2, true)
		}},
		{"a read does not refresh OnCreateAndWrite nor change anything", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl, Update: OnCreateAndWrite}))
			ok(t, v.Put([]byte("k"), 1))
			checkpoint(t, e.s, e.l)
			e.clock.Advance(6 * time.Second)
			wantValue(t, v, "k", 1, true)
			if c := e.s.Changes(); len(c) != 0 {
				t.Fatalf("a read made changes: %v", c)
			}
			checkpoint(t, e.s, e.l)
			e.clock.Advance(6 * time.Second)
			wantValue(t, v, "k", 0, false)
		}},
		{"a read refreshes OnReadAndWrite and the refresh reaches the changelog", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl, Update: OnReadAndWrite}))
			ok(t, v.Put([]byte("k"), 1))
			checkpoint(t, e.s, e.l)
			e.clock.Advance(6 * time.Second)
			wantValue(t, v, "k", 1, true) // expiry now at 16s
			c := e.s.Changes()
			if len(c) != 1 || valueExp(c[0].Value) != e.clock.Now().Add(ttl).UnixNano() {
				t.Fatalf("Changes after a refreshing read = %v; want k with the new expiry", c)
			}
			ok(t, e.s.Commit(e.l.produce(c)))
			e.clock.Advance(6 * time.Second) // 12s
			// A store restored from the changelog expires it at the same time.
			other := must[*Store](t)(Open(NewMemory(), "agg", 3, testFP, e.clock))
			defer other.Close()
			restoreAll(t, other, e.l)
			ov := must[*Value[int]](t)(NewValue[int](other, "v", TTLConfig{TTL: ttl, Update: OnCreateAndWrite}))
			wantValue(t, ov, "k", 1, true)
			wantValue(t, v, "k", 1, true)    // refreshed again, to 22s
			e.clock.Advance(5 * time.Second) // 17s
			wantValue(t, ov, "k", 0, false)
			wantValue(t, v, "k", 1, true)
		}},
		{"map entries and lists expire on their own", func(t *testing.T, e env) {
			m := must[*Map[int]](t)(NewMap[int](e.s, "m", TTLConfig{TTL: ttl}))
			l := must[*List[int]](t)(NewList[int](e.s, "l", TTLConfig{TTL: ttl}, 0))
			ok(t, m.Put([]byte("k"), "a", 1))
			ok(t, l.Add([]byte("k"), 1))
			ok(t, l.Add([]byte("k2"), 1))
			e.cp()
			e.clock.Advance(5 * time.Second)
			ok(t, m.Put([]byte("k"), "b", 2))
			ok(t, l.Add([]byte("k"), 2)) // refreshes the whole list
			e.cp()
			e.clock.Advance(5 * time.Second)
			wantEntries(t, m, "k", map[string]int{"b": 2})
			wantList(t, l, "k", []int{1, 2})
			wantList(t, l, "k2", nil)
			if n := must[int](t)(e.s.Expire(e.clock.Now(), 100)); n != 2 && n != 0 {
				t.Fatalf("Expire removed %d; want 2 (committed) or 0 (uncommitted)", n)
			}
			e.cp()
			wantEntries(t, m, "k", map[string]int{"b": 2})
		}},
		{"expired values still uncommitted are not committed", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			checkpoint(t, e.s, e.l)
			ok(t, v.Put([]byte("k"), 1))
			e.clock.Advance(ttl)
			c := e.s.Changes()
			// k was never committed: a tombstone for it is needed by
			// none, and the memory backend writes none.
			if len(c) > 1 || len(c) == 1 && c[0].Value != nil {
				t.Fatalf("Changes = %v; want no record or a tombstone for k", c)
			}
			ok(t, e.s.Commit(e.l.produce(c)))
			if st := e.s.Stats(); st.Expired != 1 {
				t.Fatalf("Stats.Expired = %d; want 1", st.Expired)
			}
		}},
		{"Expire removes expired entries and tombstones them in the changelog", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			keep := must[*Value[int]](t)(NewValue[int](e.s, "keep", TTLConfig{}))
			for i := range 5 {
				ok(t, v.Put(fmt.Appendf(nil, "k%d", i), i))
				ok(t, keep.Put(fmt.Appendf(nil, "k%d", i), i))
			}
			checkpoint(t, e.s, e.l)
			e.clock.Advance(ttl)
			if n := must[int](t)(e.s.Expire(e.clock.Now(), 100)); n != 5 {
				t.Fatalf("Expire removed %d; want 5", n)
			}
			c := e.s.Changes()
			if got := keysOf(t, c); !slices.Equal(got, []string{"v/k0=<tombstone>", "v/k1=<tombstone>", "v/k2=<tombstone>", "v/k3=<tombstone>", "v/k4=<tombstone>"}) {
				t.Fatalf("Changes = %q", got)
			}
			ok(t, e.s.Commit(e.l.produce(c)))
			if n := must[int](t)(e.s.Expire(e.clock.Now(), 100)); n != 0 {
				t.Fatalf("second Expire removed %d; want 0", n)
			}
			if st := e.s.Stats(); st.Expired != 5 || (st.Keys != -1 && st.Keys != 5) {
				t.Fatalf("Stats = %+v; want 5 expired, 5 keys left", st)
			}
			// Even with the clock turned back, the entries are gone.
			e.clock.Advance(-ttl)
			wantValue(t, v, "k0", 0, false)
			wantValue(t, keep, "k0", 0, true)
		}},
		{"Expire removes the earliest expiries first", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			// Keys written 100ms apart, in an order unrelated to their
			// names.
			order := rand.New(rand.NewPCG(3, 4)).Perm(20)
			for _, i := range order {
				ok(t, v.Put(fmt.Appendf(nil, "k%02d", i), i))
				e.clock.Advance(100 * time.Millisecond)
			}
			checkpoint(t, e.s, e.l)
			e.clock.Advance(ttl)
			if n := must[int](t)(e.s.Expire(e.clock.Now(), 5)); n != 5 {
				t.Fatalf("Expire removed %d; want 5", n)
			}
			var want []string
			for _, i := range order[:5] {
				want = append(want, fmt.Sprintf("v/k%02d=<tombstone>", i))
			}
			slices.Sort(want)
			if got := keysOf(t, e.s.Changes()); !slices.Equal(got, want) {
				t.Fatalf("expired %q; want the first five written, %q", got, want)
			}
		}},
		{"Expire leaves entries rewritten since the commit", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			ok(t, v.Put([]byte("k"), 1))
			checkpoint(t, e.s, e.l)
			e.clock.Advance(5 * time.Second)
			ok(t, v.Put([]byte("k"), 2))
			e.clock.Advance(5 * time.Second)
			if n := must[int](t)(e.s.Expire(e.clock.Now(), 100)); n != 0 {
				t.Fatalf("Expire removed %d; want 0", n)
			}
			checkpoint(t, e.s, e.l)
			wantValue(t, v, "k", 2, true)
			e.clock.Advance(5 * time.Second)
			if n := must[int](t)(e.s.Expire(e.clock.Now(), 100)); n != 1 {
				t.Fatalf("Expire at the new expiry removed %d; want 1", n)
			}
		}},
		{"an aborted Expire is done again", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			for i := range 3 {
				ok(t, v.Put(fmt.Appendf(nil, "k%d", i), i))
			}
			checkpoint(t, e.s, e.l)
			e.clock.Advance(ttl)
			for range 2 {
				if n := must[int](t)(e.s.Expire(e.clock.Now(), 100)); n != 3 {
					t.Fatalf("Expire removed %d; want 3", n)
				}
				if n := must[int](t)(e.s.Expire(e.clock.Now(), 100)); n != 0 {
					t.Fatalf("Expire again before the checkpoint removed %d; want 0", n)
				}
				s := e.s.Changes()
				if len(s) != 3 {
					t.Fatalf("Changes = %v", s)
				}
				ok(t, e.s.Abort())
			}
		}},
		{"a value rewritten without a TTL no longer expires", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			ok(t, v.Put([]byte("k"), 1))
			checkpoint(t, e.s, e.l)
			ok(t, e.s.Close())
			// The same state opened again without a TTL (the runtime's
			// fingerprint would normally change with it).
			s := must[*Store](t)(Open(e.b, "agg", 3, testFP, e.clock))
			defer s.Close()
			v = must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
			ok(t, v.Put([]byte("k"), 2))
			checkpoint(t, s, e.l)
			e.clock.Advance(ttl)
			for range 2 {
				if n := must[int](t)(s.Expire(e.clock.Now(), 100)); n != 0 {
					t.Fatalf("Expire removed %d; want 0", n)
				}
				checkpoint(t, s, e.l)
			}
			wantValue(t, v, "k", 2, true)
		}},
		{"expiries survive a restore on another backend", func(t *testing.T, e env) {
			v := must[*Value[int]](t)(NewValue[int](e.s, "v", TTLConfig{TTL: ttl}))
			ok(t, v.Put([]byte("a"), 1))
			e.clock.Advance(5 * time.Second)
			ok(t, v.Put([]byte("b"), 2))
			checkpoint(t, e.s, e.l)
			for _, bk := range backendKinds {
				other := must[*Store](t)(Open(bk.new(t), "agg", 3, testFP, e.clock))
				restoreAll(t, other, e.l)
				clock := *e.clock
				clock.Advance(5 * time.Second)
				if n := must[int](t)(other.Expire(clock.Now(), 100)); n != 1 {
					t.Fatalf("%s: Expire removed %d; want 1", bk.name, n)
				}
				if got := keysOf(t, other.Changes()); !slices.Equal(got, []string{"v/a=<tombstone>"}) {
					t.Fatalf("%s: expired %q; want a", bk.name, got)
				}
				ok(t, other.Close())
			}
		}},
	}
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		for _, mode := range []string{"uncommitted", "committed between steps"} {
			t.Run(mode, func(t *testing.T) {
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						clock := newFakeClock()
						b := bk.new(t)
						s := mustOpen(t, b, clock)
						l := &changelog{}
						cp := func() {}
						if mode != "uncommitted" {
							cp = func() { checkpoint(t, s, l) }
						}
						c.run(t, env{s: s, clock: clock, l: l, b: b, cp: cp})
					})
				}
			})
		}
	})
}

// TestExpireCostIsProportionalToExpired expires 100 of 100,000 keys and
// counts the work: heap comparisons (memory) or index entries visited
// (pebble), never a scan of the store.
func TestExpireCostIsProportionalToExpired(t *testing.T) {
	const keys, expired = 100_000, 100
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		clock := newFakeClock()
		start := clock.Now()
		s := mustOpen(t, bk.new(t), clock)
		v := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{TTL: time.Hour}))
		var l changelog
		for i := range keys {
			// Names in reverse of expiry order, so key order does not help.
			ok(t, v.Put(fmt.Appendf(nil, "k%06d", keys-i), i))
			clock.Advance(time.Millisecond)
		}
		checkpoint(t, s, &l)

		now := start.Add(time.Hour + (expired-1)*time.Millisecond)
		before := s.tab.expireWork()
		n := must[int](t)(s.Expire(now, 10*expired))
		work := s.tab.expireWork() - before
		if n != expired {
			t.Fatalf("Expire removed %d; want %d", n, expired)
		}
		// A heap pop costs about 2·log2(n) comparisons.
		limit := int64(expired + 1)
		if bk.name == "memory" {
			limit = int64(expired * (2*bits.Len(keys) + 2))
		}
		t.Logf("%s: expired %d of %d keys with %d units of work (limit %d)", bk.name, n, keys, work, limit)
		if work > limit {
			t.Fatalf("Expire did %d units of work for %d expired keys; want at most %d", work, n, limit)
		}
		// The earliest expiries are the highest names.
		var want []string
		for i := range expired {
			want = append(want, fmt.Sprintf("v/k%06d=<tombstone>", keys-expired+1+i))
		}
		if got := keysOf(t, s.Changes()); !slices.Equal(got, want) {
			t.Fatalf("expired %q...; want %q...", got[:3], want[:3])
		}
		checkpoint(t, s, &l)
		before = s.tab.expireWork()
		if n := must[int](t)(s.Expire(now, math.MaxInt)); n != 0 {
			t.Fatalf("second Expire removed %d", n)
		}
		if work := s.tab.expireWork() - before; work > 2 {
			t.Fatalf("an Expire with nothing to do did %d units of work", work)
		}
		wantValue(t, v, fmt.Sprintf("k%06d", keys), 0, false)
		wantValue(t, v, fmt.Sprintf("k%06d", keys-expired), expired, true)
	})
}
