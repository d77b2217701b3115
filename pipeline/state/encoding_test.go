package state

import "testing"

// TestMapGroupLenAsParseKey checks the short walk mapGroupLen takes over a
// key against parseKey's reading of it, for well-formed keys of every kind
// and for broken ones: a map entry's group prefix, 0 for anything else.
func TestMapGroupLenAsParseKey(t *testing.T) {
	long := make([]byte, 300) // a key whose length takes two varint bytes
	keys := map[string][]byte{
		"value":               appendGroup(nil, statePrefix("v"), []byte("k1"), subNone),
		"map entry":           append(appendGroup(nil, statePrefix("m"), []byte("k1"), subMap), "field"...),
		"map entry, long key": append(appendGroup(nil, statePrefix("m"), long, subMap), long...),
		"empty map key":       appendGroup(nil, statePrefix("m"), []byte("k"), subMap),
		"empty key":           appendGroup(nil, statePrefix("m"), nil, subMap),
		"metadata":            append([]byte{recMeta}, "applied"...),
		"empty":               nil,
		"unknown kind":        {0x7f, 1, 'x'},
		"no flag":             appendGroup(nil, statePrefix("m"), []byte("k"), subMap)[:5],
		"length past the end": {recData, 9, 'm'},
		"bad varint":          {recData, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"unknown flag":        appendGroup(nil, statePrefix("m"), []byte("k"), 0x7e),
		"trailing bytes":      append(appendGroup(nil, statePrefix("v"), []byte("k"), subNone), 'z'),
	}
	groups := 0
	for name, k := range keys {
		want := 0
		if rk, err := parseKey(k); err == nil {
			want = rk.group
		}
		if want > 0 {
			groups++
		}
		if got := mapGroupLen(k); got != want {
			t.Errorf("%s %q: mapGroupLen = %d, parseKey's group = %d", name, k, got, want)
		}
	}
	if groups != 4 {
		t.Errorf("%d of the keys are map entries by parseKey, want 4", groups)
	}
}
