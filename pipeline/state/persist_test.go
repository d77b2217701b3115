package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReopen checks what survives closing a store (and for pebble the
// process): the committed state, its applied offset, its expiry index.
func TestReopen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		{
			t.Run("reopening after Close keeps the data and the applied offset", func(t *testing.T) {
				dir := t.TempDir()
				clock := newFakeClock()
				var b Backend = NewMemory()
				if bk.name == "pebble" {
					b = newPebble(t, dir)
				}
				s := must[*Store](t)(Open(b, "agg", 3, testFP, clock))
				k := newKinds(t, s)
				exp := must[*Value[int]](t)(NewValue[int](s, "exp", TTLConfig{TTL: ttl}))
				var l changelog
				ok(t, k.v.Put([]byte("k1"), 1))
				ok(t, k.m.Put([]byte("k1"), "a", 2))
				ok(t, k.l.Add([]byte("k2"), 3))
				ok(t, exp.Put([]byte("k1"), 4))
				checkpoint(t, s, &l)
				ok(t, k.v.Put([]byte("k2"), 5)) // not committed
				want := k.read(t)
				delete(want.vals, "k2")
				ok(t, s.Close())
				if bk.name == "pebble" {
					ok(t, b.Close())
					b = newPebble(t, dir)
				}
				s = must[*Store](t)(Open(b, "agg", 3, testFP, clock))
				defer s.Close()
				k = newKinds(t, s)
				exp = must[*Value[int]](t)(NewValue[int](s, "exp", TTLConfig{TTL: ttl}))
				if got := s.AppliedOffset(); got != l.last() {
					t.Fatalf("AppliedOffset after reopen = %d; want %d", got, l.last())
				}
				checkModel(t, "after reopen", k, want)
				if c := s.Changes(); len(c) != 0 {
					t.Fatalf("Changes after reopen = %v; want none (the fingerprint is known)", c)
				}
				ok(t, s.Abort())
				clock.Advance(ttl)
				if n := must[int](t)(s.Expire(clock.Now(), 10)); n != 1 {
					t.Fatalf("Expire after reopen removed %d; want 1", n)
				}
				ok(t, s.Abort())
				if bk.name == "pebble" {
					ok(t, s.Close())
					ok(t, b.Close())
				}
			})
		}
	})
}

// TestCrashRecovery simulates the two crashes around a checkpoint's commit:
// the Kafka transaction committed but the store did not (crash before the
// local write), and the store committed but the runtime replays the
// changelog anyway (crash after it).
func TestCrashRecovery(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		t.Run("a crash before the local write is repaired by restoring the tail", func(t *testing.T) {
			dir := t.TempDir()
			var b Backend = NewMemory()
			if bk.name == "pebble" {
				b = newPebble(t, dir)
			}
			clock := newFakeClock()
			s := must[*Store](t)(Open(b, "agg", 3, testFP, clock))
			k := newKinds(t, s)
			exp := must[*Value[int]](t)(NewValue[int](s, "exp", TTLConfig{TTL: ttl}))
			var l changelog
			ok(t, k.v.Put([]byte("k1"), 1))
			ok(t, exp.Put([]byte("k1"), 1))
			checkpoint(t, s, &l)
			applied := s.AppliedOffset()

			ok(t, k.v.Put([]byte("k1"), 2))
			ok(t, k.v.Delete([]byte("k0")))
			ok(t, k.m.Put([]byte("k3"), "x", 3))
			ok(t, k.r.Add([]byte("k4"), 4))
			clock.Advance(time.Second)
			ok(t, exp.Put([]byte("k1"), 2))
			want := k.read(t)
			l.produce(s.Changes()) // the transaction commits...
			// ...and the process dies before Commit.
			ok(t, s.Close())
			if bk.name == "pebble" {
				ok(t, b.Close())
				b = newPebble(t, dir)
				defer b.Close()
			}
			s = must[*Store](t)(Open(b, "agg", 3, testFP, clock))
			defer s.Close()
			k = newKinds(t, s)
			exp = must[*Value[int]](t)(NewValue[int](s, "exp", TTLConfig{TTL: ttl}))
			if s.AppliedOffset() != applied {
				t.Fatalf("AppliedOffset = %d; want the last commit's %d", s.AppliedOffset(), applied)
			}
			restoreAll(t, s, &l)
			checkModel(t, "after restoring the tail", k, want)
			if s.AppliedOffset() != l.last() {
				t.Fatalf("AppliedOffset = %d; want %d", s.AppliedOffset(), l.last())
			}
			// The restored expiry is the new one, and indexed.
			clock.Advance(ttl - time.Second)
			wantValue(t, exp, "k1", 2, true)
			if n := must[int](t)(s.Expire(clock.Now(), 10)); n != 0 {
				t.Fatalf("Expire at the old expiry removed %d", n)
			}
			clock.Advance(time.Second)
			if n := must[int](t)(s.Expire(clock.Now(), 10)); n != 1 {
				t.Fatalf("Expire at the new expiry removed %d; want 1", n)
			}
		})
		t.Run("after the local write, replaying records already applied changes nothing", func(t *testing.T) {
			s := mustOpen(t, bk.new(t), newFakeClock())
			k := newKinds(t, s)
			var l changelog
			ok(t, k.v.Put([]byte("k1"), 1))
			checkpoint(t, s, &l)
			firstEnd := l.last()
			ok(t, k.v.Put([]byte("k1"), 2))
			ok(t, k.m.Put([]byte("k1"), "a", 1))
			checkpoint(t, s, &l)
			ok(t, k.m.Remove([]byte("k1"), "a"))
			checkpoint(t, s, &l)
			want := k.read(t)
			applied := s.AppliedOffset()

			// The whole log, then only its first checkpoint (which
			// holds the older k1 = 1): neither may go back.
			ok(t, s.Restore(l.from(0), l.last()))
			checkModel(t, "after replaying the whole log", k, want)
			ok(t, s.Restore(l.from(0)[:firstEnd+1], firstEnd))
			checkModel(t, "after replaying the first checkpoint", k, want)
			if s.AppliedOffset() != applied {
				t.Fatalf("AppliedOffset = %d; want %d", s.AppliedOffset(), applied)
			}
			if c := s.Changes(); len(c) != 0 {
				t.Fatalf("a replay made changes: %v", c)
			}
		})
		t.Run("a restore in several batches ends where one batch would", func(t *testing.T) {
			var l changelog
			a := mustOpen(t, NewMemory(), newFakeClock())
			k := newKinds(t, a)
			for i := range 50 {
				key := []byte{'k', byte('0' + i%12)}
				ok(t, k.v.Put(key, i))
				ok(t, k.m.Put(key, string(rune('a'+i%3)), i))
				if i%5 == 4 {
					checkpoint(t, a, &l)
				}
			}
			want := k.read(t)
			s := mustOpen(t, bk.new(t), newFakeClock())
			for off := int64(0); off <= l.last(); off += 7 {
				end := min(off+7, l.last()+1)
				ok(t, s.Restore(l.recs[off:end], end-1))
			}
			checkModel(t, "restored in batches", newKinds(t, s), want)
		})
	})
}

// TestPebbleCrash crashes the file system under pebble at random points: the
// writes not synced are lost in part or in full. Whatever survives must be
// the state of one committed checkpoint with its own applied offset (the
// data and the offset are one batch), and restoring the changelog tail from
// there must give the last committed state.
func TestPebbleCrash(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			fs := vfs.NewCrashableMem()
			sync := seed%2 == 1
			p, err := OpenPebble("db", WithLogger(quiet), withFS(fs), WithSync(sync))
			ok(t, err)
			s := must[*Store](t)(Open(p, "agg", 3, testFP, newFakeClock()))
			k := newKinds(t, s)
			var l changelog
			cur := newModel()
			byOffset := map[int64]*model{-1: newModel()}
			var crashed *vfs.MemFS
			for i := range 400 {
				step(t, rng, k, cur)
				if rng.IntN(10) == 0 {
					checkpoint(t, s, &l)
					byOffset[s.AppliedOffset()] = cur.clone()
				}
				if crashed == nil && i > 200 && rng.IntN(50) == 0 {
					crashed = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
				}
			}
			checkpoint(t, s, &l)
			if crashed == nil {
				crashed = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})
			}
			ok(t, s.Close())
			ok(t, p.Close())

			p, err = OpenPebble("db", WithLogger(quiet), withFS(crashed))
			ok(t, err)
			defer p.Close()
			s = must[*Store](t)(Open(p, "agg", 3, testFP, newFakeClock()))
			defer s.Close()
			k = newKinds(t, s)
			applied := s.AppliedOffset()
			want, found := byOffset[applied]
			if !found {
				t.Fatalf("after the crash AppliedOffset is %d, which no checkpoint ended at", applied)
			}
			checkModel(t, fmt.Sprintf("after the crash, at applied offset %d", applied), k, want)
			restoreAll(t, s, &l)
			checkModel(t, "after restoring the tail", k, cur)
			t.Logf("sync %v: crash kept the state at offset %d of %d", sync, applied, l.last())
		})
	}
}
