package state

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestRestoreManyKeys restores more keys than one block of the memory
// backend's arena holds, keys and values of every length up to past the
// longest that shares a block (values and map entries), then changes
// and deletes some of them and restores again, checking each batch first
// and applying it unchecked, as the runtime does: every key reads back as
// written, and none that was deleted.
func TestRestoreManyKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		const n = 1200
		key := func(i int) []byte {
			return append(fmt.Appendf(nil, "k%d-", i), bytes.Repeat([]byte{byte('a' + i%26)}, (i*37)%(ownBlock/3)+i%3*ownBlock/8)...)
		}
		open := func() (*Store, *Value[string], *Map[int]) {
			s := mustOpen(t, bk.new(t), newFakeClock())
			v := must[*Value[string]](t)(NewValue[string](s, "v", TTLConfig{}))
			m := must[*Map[int]](t)(NewMap[int](s, "m", TTLConfig{}))
			return s, v, m
		}
		first := func(i int) (string, bool) {
			return fmt.Sprint("value of ", i, strings.Repeat("v", (i*53)%(ownBlock/3)+i%3*ownBlock/8)), true
		}
		var l changelog
		s, v, m := open()
		for i := range n {
			want, _ := first(i)
			ok(t, v.Put(key(i), want))
			ok(t, m.Put(key(i), fmt.Sprint("e", i%5), i))
		}
		checkpoint(t, s, &l)
		check := func(what string, v *Value[string], m *Map[int], changed func(int) (string, bool)) {
			t.Helper()
			for i := range n {
				want, live := changed(i)
				got, found, err := v.Get(key(i))
				ok(t, err)
				if found != live || got != want {
					t.Fatalf("%s: key %d reads %q, %v; want %q, %v", what, i, got, found, want, live)
				}
				x, found, err := m.Get(key(i), fmt.Sprint("e", i%5))
				ok(t, err)
				if !found || x != i {
					t.Fatalf("%s: map entry of key %d reads %d, %v; want %d", what, i, x, found, i)
				}
			}
		}
		s2, v2, m2 := open()
		restoreAll(t, s2, &l)
		check("restored", v2, m2, first)

		// Change a third, delete a third, of the restored keys.
		second := func(i int) (string, bool) {
			switch i % 3 {
			case 1:
				return fmt.Sprint("changed ", i), true
			case 2:
				return "", false
			}
			return first(i)
		}
		for i := range n {
			switch i % 3 {
			case 1:
				ok(t, v2.Put(key(i), fmt.Sprint("changed ", i)))
			case 2:
				ok(t, v2.Delete(key(i)))
			}
		}
		check("changed after the restore", v2, m2, second)
		checkpoint(t, s2, &l)
		_, v3, m3 := func() (*Store, *Value[string], *Map[int]) {
			s3, v3, m3 := open()
			recs := l.from(0)
			ok(t, s3.CheckChangelog(recs))
			for i := 0; i < len(recs); i += 100 {
				ok(t, s3.RestoreChecked(recs[i:min(i+100, len(recs))], recs[min(i+100, len(recs))-1].Offset))
			}
			return s3, v3, m3
		}()
		check("restored again", v3, m3, second)
	})
}
