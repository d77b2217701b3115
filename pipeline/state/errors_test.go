package state

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestRestoreRefusesCorruptRecords(t *testing.T) {
	good := ChangelogRecord{Key: appendGroup(nil, statePrefix("v"), []byte("k"), subNone), Value: append(appendHeader(nil, 0), '1'), Offset: 10}
	cases := []struct {
		name string
		rec  ChangelogRecord
	}{
		{"an empty key", ChangelogRecord{Key: []byte{}, Value: good.Value}},
		{"a key of an unknown type", ChangelogRecord{Key: []byte("\x07garbage"), Value: good.Value}},
		{"a key whose state name runs past its end", ChangelogRecord{Key: []byte("\x01\x09v"), Value: good.Value}},
		{"a key whose user key runs past its end", ChangelogRecord{Key: []byte("\x01\x01v\x05k"), Value: good.Value}},
		{"a key without its map-key flag", ChangelogRecord{Key: []byte("\x01\x01v\x01k"), Value: good.Value}},
		{"a key with an unknown map-key flag", ChangelogRecord{Key: []byte("\x01\x01v\x01k\x07"), Value: good.Value}},
		{"a key with trailing bytes", ChangelogRecord{Key: []byte("\x01\x01v\x01k\x00junk"), Value: good.Value}},
		{"an unknown metadata record", ChangelogRecord{Key: []byte("\x00color"), Value: []byte("blue")}},
		{"an empty value", ChangelogRecord{Key: good.Key, Value: []byte{}}},
		{"a value of an unknown format", ChangelogRecord{Key: good.Key, Value: []byte("{\"json\":1}")}},
		{"a value too short for its expiry", ChangelogRecord{Key: good.Key, Value: []byte{valFormat | valHasExp, 0, 1}}},
		{"a value with a negative expiry", ChangelogRecord{Key: good.Key, Value: appendHeader(nil, -5)}},
		// Sound framing, but the state's codec cannot read the payload:
		// refused here rather than by the first read of the key.
		{"a payload the state's codec cannot decode", ChangelogRecord{Key: good.Key, Value: append(appendHeader(nil, 0), "garbage"...)}},
		{"an empty payload", ChangelogRecord{Key: good.Key, Value: appendHeader(nil, 0)}},
		{"a tombstone of a state the operator does not register", ChangelogRecord{Key: appendGroup(nil, statePrefix("w"), []byte("k"), subNone)}},
		{"a value of a state the operator does not register", ChangelogRecord{Key: appendGroup(nil, statePrefix("w"), []byte("k"), subNone), Value: good.Value}},
		{"a map entry of a value state", ChangelogRecord{Key: append(appendGroup(nil, statePrefix("v"), []byte("k"), subMap), "mk"...), Value: good.Value}},
	}
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				s := mustOpen(t, bk.new(t), newFakeClock())
				v := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
				bad := c.rec
				bad.Offset = 11
				// Checked alone, as the runtime checks a batch before
				// applying it, the record is refused the same way.
				cerr := s.CheckChangelog([]ChangelogRecord{good, bad})
				err := s.Restore([]ChangelogRecord{good, bad}, 11)
				if cerr == nil || err == nil || cerr.Error() != err.Error() {
					t.Fatalf("CheckChangelog = %v; want Restore's error, %v", cerr, err)
				}
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Restore = %v; want a *CorruptError", err)
				}
				if ce.Store != "agg" || ce.Task != 3 || ce.Offset != 11 {
					t.Fatalf("CorruptError names store %q task %d offset %d; want agg, 3, 11", ce.Store, ce.Task, ce.Offset)
				}
				for _, want := range []string{`"agg"`, "task 3", "offset 11"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %s", err, want)
					}
				}
				// Nothing of the batch is applied.
				wantValue(t, v, "k", 0, false)
				if got := s.AppliedOffset(); got != -1 {
					t.Fatalf("AppliedOffset = %d; want -1", got)
				}
			})
		}
	})
}

func TestCodecErrorsNameTheStateAndKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		b := bk.new(t)
		s := mustOpen(t, b, newFakeClock())
		var l changelog
		v := must[*Value[string]](t)(NewValue[string](s, "v", TTLConfig{}))
		ok(t, v.Put([]byte("k"), "not a number"))
		checkpoint(t, s, &l)
		ok(t, s.Close())

		s = mustOpen(t, b, newFakeClock())
		n := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
		_, _, err := n.Get([]byte("k"))
		if err == nil {
			t.Fatal("decoding a string as an int succeeded")
		}
		for _, want := range []string{`"agg"`, "task 3", `state "v"`, `key "k"`, "decoding"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %s", err, want)
			}
		}
		f := must[*Value[float64]](t)(NewValue[float64](s, "f", TTLConfig{}))
		if err := f.Put([]byte("k"), math.NaN()); err == nil || !strings.Contains(err.Error(), "encoding") {
			t.Fatalf("Put(NaN) = %v; want an encoding error", err)
		}
	})
}

func TestFingerprints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		t.Run("opening a store whose state has another fingerprint is refused", func(t *testing.T) {
			b := bk.new(t)
			s := must[*Store](t)(Open(b, "agg", 3, "fp-old", nil))
			var l changelog
			checkpoint(t, s, &l)
			ok(t, must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{})).Put([]byte("k"), 1))
			checkpoint(t, s, &l)
			ok(t, s.Close())
			_, err := Open(b, "agg", 3, "fp-new", nil)
			var ie *IncompatibleError
			if !errors.Is(err, ErrIncompatible) || !errors.As(err, &ie) {
				t.Fatalf("Open = %v; want an ErrIncompatible", err)
			}
			// Applied tells the runtime whether the changelog still
			// holds the local state.
			if ie.Have != "fp-old" || ie.Want != "fp-new" || ie.Offset != -1 || ie.Applied != l.last() || l.last() != 1 {
				t.Fatalf("IncompatibleError = %+v; want the local state's applied offset %d", ie, l.last())
			}
			for _, want := range []string{"fp-old", "fp-new", `"agg"`, "task 3"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
			// The same fingerprint opens.
			ok(t, must[*Store](t)(Open(b, "agg", 3, "fp-old", nil)).Close())
		})
		t.Run("restoring a changelog written under another fingerprint is refused", func(t *testing.T) {
			var l changelog
			old := must[*Store](t)(Open(NewMemory(), "agg", 3, "fp-old", nil))
			v := must[*Value[int]](t)(NewValue[int](old, "v", TTLConfig{}))
			ok(t, v.Put([]byte("k"), 1))
			checkpoint(t, old, &l)

			s := must[*Store](t)(Open(bk.new(t), "agg", 3, "fp-new", nil))
			defer s.Close()
			err := s.Restore(l.from(0), l.last())
			var ie *IncompatibleError
			if !errors.As(err, &ie) || ie.Have != "fp-old" || ie.Want != "fp-new" || ie.Offset != 0 {
				t.Fatalf("Restore = %v; want an IncompatibleError at offset 0", err)
			}
			if !strings.Contains(err.Error(), "changelog offset 0") {
				t.Errorf("error %q does not name the offset", err)
			}
			if s.AppliedOffset() != -1 {
				t.Fatal("a refused restore moved the applied offset")
			}
		})
		t.Run("a restored fingerprint is not written again", func(t *testing.T) {
			var l changelog
			a := must[*Store](t)(Open(NewMemory(), "agg", 3, testFP, nil))
			checkpoint(t, a, &l)
			s := mustOpen(t, bk.new(t), nil)
			restoreAll(t, s, &l)
			if c := s.Changes(); len(c) != 0 {
				t.Fatalf("Changes after restore = %v; want none", c)
			}
		})
		t.Run("Reset deletes one store's state, applied offset and fingerprint", func(t *testing.T) {
			b := bk.new(t)
			var l changelog
			for _, task := range []int32{3, 4} {
				s := must[*Store](t)(Open(b, "agg", task, "fp-old", nil))
				v := must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{}))
				ok(t, v.Put([]byte("k"), int(task)))
				checkpoint(t, s, &l)
				ok(t, s.Close())
			}
			ok(t, Reset(b, "agg", 3))
			s := must[*Store](t)(Open(b, "agg", 3, "fp-new", nil))
			defer s.Close()
			if s.AppliedOffset() != -1 {
				t.Fatalf("AppliedOffset after Reset = %d", s.AppliedOffset())
			}
			wantValue(t, must[*Value[int]](t)(NewValue[int](s, "v", TTLConfig{})), "k", 0, false)
			if c := s.Changes(); len(c) != 1 || string(c[0].Value) != "fp-new" {
				t.Fatalf("first Changes after Reset = %v; want the new fingerprint", c)
			}
			// Task 4 is untouched.
			s4 := must[*Store](t)(Open(b, "agg", 4, "fp-old", nil))
			defer s4.Close()
			wantValue(t, must[*Value[int]](t)(NewValue[int](s4, "v", TTLConfig{})), "k", 4, true)
		})
	})
}

// TestRestoreChecksEveryKindsPayloads writes one key of each state kind,
// then restores the changelog into stores that register the same kinds, with
// each kind's record in turn replaced by one whose payload its codec cannot
// read: the restore names that record, and with sound records it succeeds.
func TestRestoreChecksEveryKindsPayloads(t *testing.T) {
	var l changelog
	register := func(s *Store) {
		t.Helper()
		must[*Value[int]](t)(NewValue[int](s, "value", TTLConfig{}))
		must[*List[int]](t)(NewList[int](s, "list", TTLConfig{}, 0))
		must[*Map[int]](t)(NewMap[int](s, "map", TTLConfig{}))
		must[*Reducing[int]](t)(NewReducing[int](s, "reducing", func(a, b int) (int, error) { return a + b, nil }, TTLConfig{}))
	}
	src := must[*Store](t)(Open(NewMemory(), "agg", 3, testFP, nil))
	defer src.Close()
	v := must[*Value[int]](t)(NewValue[int](src, "value", TTLConfig{}))
	li := must[*List[int]](t)(NewList[int](src, "list", TTLConfig{}, 0))
	m := must[*Map[int]](t)(NewMap[int](src, "map", TTLConfig{}))
	r := must[*Reducing[int]](t)(NewReducing[int](src, "reducing", func(a, b int) (int, error) { return a + b, nil }, TTLConfig{}))
	ok(t, v.Put([]byte("k"), 1))
	ok(t, li.Add([]byte("k"), 1))
	ok(t, li.Add([]byte("k"), 2))
	ok(t, m.Put([]byte("k"), "mk", 3))
	ok(t, r.Add([]byte("k"), 4))
	checkpoint(t, src, &l)

	forEachBackend(t, func(t *testing.T, bk backendKind) {
		t.Run("sound records restore", func(t *testing.T) {
			s := mustOpen(t, bk.new(t), nil)
			register(s)
			restoreAll(t, s, &l)
			if s.AppliedOffset() != l.last() {
				t.Fatalf("AppliedOffset = %d; want %d", s.AppliedOffset(), l.last())
			}
		})
		for i, rec := range l.recs {
			if rec.Key[0] == recMeta {
				continue
			}
			rk := must[recordKey](t)(parseKey(rec.Key))
			for _, payload := range []string{"garbage", "\x01"} {
				t.Run(fmt.Sprintf("a %s record with payload %q", rk.state, payload), func(t *testing.T) {
					bad := append([]ChangelogRecord(nil), l.recs...)
					bad[i].Value = append(appendHeader(nil, 0), payload...)
					s := mustOpen(t, bk.new(t), nil)
					register(s)
					err := s.Restore(bad, int64(len(bad)-1))
					var ce *CorruptError
					if !errors.As(err, &ce) || ce.Offset != int64(i) {
						t.Fatalf("Restore = %v; want a *CorruptError at offset %d", err, i)
					}
					if !strings.Contains(err.Error(), fmt.Sprintf("state %q", rk.state)) {
						t.Errorf("error %q does not name state %q", err, rk.state)
					}
					if s.AppliedOffset() != -1 {
						t.Fatal("a refused restore moved the applied offset")
					}
				})
			}
		}
		t.Run("a store with no state registered checks the framing only", func(t *testing.T) {
			bad := append([]ChangelogRecord(nil), l.recs...)
			bad[len(bad)-1].Value = append(appendHeader(nil, 0), "garbage"...)
			s := mustOpen(t, bk.new(t), nil)
			ok(t, s.Restore(bad, int64(len(bad)-1)))
		})
	})
}

// TestExpectRestoreKeepsWhatTheStoreHolds: a restore announced with
// ExpectRestore reads back like any other, on an empty store and on one
// that already holds keys (which a table sized afresh would lose).
func TestExpectRestoreKeepsWhatTheStoreHolds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		src := mustOpen(t, bk.new(t), newFakeClock())
		v := must[*Value[int]](t)(NewValue[int](src, "v", TTLConfig{}))
		for i := range 20 {
			ok(t, v.Put([]byte(fmt.Sprint("k", i)), i))
		}
		recs := src.Changes()
		for i := range recs {
			recs[i].Offset = int64(i)
		}
		ok(t, src.Commit(int64(len(recs)-1)))

		dst := mustOpen(t, bk.new(t), newFakeClock())
		w := must[*Value[int]](t)(NewValue[int](dst, "v", TTLConfig{}))
		half := len(recs) / 2
		dst.ExpectRestore(int64(half))
		ok(t, dst.Restore(recs[:half], int64(half-1)))
		dst.ExpectRestore(int64(len(recs) - half)) // not empty now: must keep the first half
		ok(t, dst.Restore(recs[half:], int64(len(recs)-1)))
		for i := range 20 {
			got, found, err := w.Get([]byte(fmt.Sprint("k", i)))
			if err != nil || !found || got != i {
				t.Fatalf("k%d: %d, %v, %v after the restore", i, got, found, err)
			}
		}
	})
}
