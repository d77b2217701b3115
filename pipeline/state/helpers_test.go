package state

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// fakeClock is a Clock tests move by hand.
type fakeClock struct{ now time.Time }

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// backendKind makes a fresh backend of one kind; a test runs against each.
type backendKind struct {
	name string
	new  func(t testing.TB) Backend
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newPebble(t testing.TB, dir string) *Pebble {
	t.Helper()
	p, err := OpenPebble(dir, WithCacheSize(8<<20), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var backendKinds = []backendKind{
	{"memory", func(t testing.TB) Backend { return NewMemory() }},
	{"pebble", func(t testing.TB) Backend {
		p := newPebble(t, t.TempDir())
		t.Cleanup(func() { _ = p.Close() })
		return p
	}},
}

// forEachBackend runs fn as a subtest per backend kind.
func forEachBackend(t *testing.T, fn func(t *testing.T, bk backendKind)) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) { fn(t, bk) })
	}
}

const testFP = "fp-1"

func mustOpen(t testing.TB, b Backend, clock Clock) *Store {
	t.Helper()
	s, err := Open(b, "agg", 3, testFP, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// changelog stands for a store's changelog partition: it gives produced
// records offsets.
type changelog struct {
	recs []ChangelogRecord
}

// produce appends recs and returns the offset of the last one, -1 if none.
func (l *changelog) produce(recs []ChangelogRecord) int64 {
	for _, r := range recs {
		r.Offset = int64(len(l.recs))
		l.recs = append(l.recs, r)
	}
	if len(recs) == 0 {
		return -1
	}
	return int64(len(l.recs) - 1)
}

// from returns the records at offsets off and later.
func (l *changelog) from(off int64) []ChangelogRecord {
	if off >= int64(len(l.recs)) {
		return nil
	}
	return l.recs[max(off, 0):]
}

func (l *changelog) last() int64 { return int64(len(l.recs)) - 1 }

// checkpoint runs the checkpoint protocol on s: produce its changes to l,
// then commit.
func checkpoint(t testing.TB, s *Store, l *changelog) {
	t.Helper()
	last := l.produce(s.Changes())
	ok(t, s.Commit(last))
}

// restoreAll restores s from l after its applied offset.
func restoreAll(t testing.TB, s *Store, l *changelog) {
	t.Helper()
	ok(t, s.Restore(l.from(s.AppliedOffset()+1), l.last()))
}
