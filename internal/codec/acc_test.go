package codec

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The binary accumulator codec must give back exactly what the JSON codec
// it replaces gave: the same values after a round trip, so that no result
// changes with the codec, and it must still read accumulators written as
// JSON.
func TestAccCodecRoundTripsAsJSONDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fixed := []any{
		nil, true, false, 0, -1, 1 << 40, int64(math.MaxInt64), int64(math.MinInt64),
		0.0, math.Copysign(0, -1), 2.0, -3.0, 0.5, 1e-7, 1e20, 1e21, 9.3e18, -9.3e18, 9.223372036854775807e18, math.MaxFloat64, math.SmallestNonzeroFloat64,
		"", "héllo", "bad \xff utf8", strings.Repeat("x", 300), []any{}, []any{1, "a", nil, 2.5},
		map[string]any{}, map[string]any{"k\xff": 1}, map[string]any{"nested": map[string]any{"a": []any{1.0, 2.5}}},
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), []string{"a", "b"}, map[string]int{"a": 1}, uint64(math.MaxUint64), int32(-7), float32(1.5),
	}
	var randValue func(depth int) any
	randValue = func(depth int) any {
		switch n := rng.IntN(10); {
		case n == 0 && depth < 3:
			l := make([]any, rng.IntN(4))
			for i := range l {
				l[i] = randValue(depth + 1)
			}
			return l
		case n == 1 && depth < 3:
			m := map[string]any{}
			for range rng.IntN(4) {
				m[string(rune('a'+rng.IntN(26)))] = randValue(depth + 1)
			}
			return m
		case n == 2:
			return rng.Int64() >> rng.IntN(64)
		case n == 3:
			return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
		case n == 4:
			return float64(rng.IntN(1000))
		default:
			return fixed[rng.IntN(len(fixed))]
		}
	}
	check := func(acc map[string]any) {
		t.Helper()
		j, jerr := AppendJSON(nil, acc)
		b, berr := Acc{}.Append(nil, acc)
		if (jerr == nil) != (berr == nil) {
			t.Fatalf("%#v: JSON error %v, binary error %v", acc, jerr, berr)
		}
		if jerr != nil {
			return
		}
		want, err := AccJSON{}.Decode(j)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Acc{}.Decode(b)
		if err != nil {
			t.Fatalf("%#v: %v", acc, err)
		}
		if err := (Acc{}).Check(b); err != nil {
			t.Fatalf("%#v decodes, but Check says %v", acc, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%#v:\n binary round trip %#v\n JSON round trip   %#v", acc, got, want)
		}
		// State written by the JSON codec reads the same.
		if old, err := (Acc{}).Decode(j); err != nil || !reflect.DeepEqual(old, want) {
			t.Fatalf("%s read as %#v, %v; want %#v", j, old, err, want)
		}
	}
	for i, v := range fixed {
		check(map[string]any{"f": v, "n": i})
	}
	check(map[string]any{"inf": math.Inf(1)})
	for range 20000 {
		acc := map[string]any{}
		for range 1 + rng.IntN(5) {
			acc[string(rune('a'+rng.IntN(26)))] = randValue(0)
		}
		check(acc)
	}
}

// A damaged accumulator is an error, never a panic or a wrong value.
func TestAccCodecRefusesDamage(t *testing.T) {
	b, err := Acc{}.Append(nil, map[string]any{"n": 12345, "s": "text", "l": []any{1.5, "x"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(b); i++ {
		if _, err := (Acc{}).Decode(b[:i]); err == nil {
			t.Errorf("cut to %d of %d bytes: no error", i, len(b))
		}
	}
	if _, err := (Acc{}).Decode(append(b, 0)); err == nil {
		t.Error("a trailing byte: no error")
	}
	if _, err := (Acc{}).Decode([]byte{accBinary, 0x42}); err == nil || !strings.Contains(err.Error(), "unknown tag") {
		t.Errorf("an unknown tag: %v", err)
	}
	if _, err := (Acc{}).Decode([]byte{accBinary, accInt, 4}); err == nil || !strings.Contains(err.Error(), "not an object") {
		t.Errorf("not an object: %v", err)
	}
	// Check fails exactly where Decode does: on every cut, and on every
	// byte of the encoding set to every value.
	agree := func(what string, b []byte) {
		t.Helper()
		_, derr := Acc{}.Decode(b)
		if cerr := (Acc{}).Check(b); (derr == nil) != (cerr == nil) {
			t.Errorf("%s (%x): Decode says %v, Check %v", what, b, derr, cerr)
		}
	}
	for i := 1; i <= len(b); i++ {
		agree(fmt.Sprintf("cut to %d", i), b[:i])
	}
	agree("a trailing byte", append(b, 0))
	agree("not an object", []byte{accBinary, accInt, 4})
	agree("a JSON accumulator", []byte(`{"n":1}`))
	agree("a JSON list", []byte(`[1]`))
	for i := range b {
		for v := range 256 {
			m := bytes.Clone(b)
			m[i] = byte(v)
			agree(fmt.Sprintf("byte %d set to %d", i, v), m)
		}
	}
}

func FuzzAccCodecDecode(f *testing.F) {
	b, _ := Acc{}.Append(nil, map[string]any{"n": 1, "l": []any{"a", 2.5, map[string]any{"x": nil}}})
	f.Add(b)
	f.Add([]byte(`{"n":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Acc{}.Decode(b)
		if cerr := (Acc{}).Check(b); (err == nil) != (cerr == nil) {
			t.Fatalf("%x: Decode says %v, Check %v", b, err, cerr)
		}
		if err != nil {
			return
		}
		// What decodes encodes again, to the same value.
		again, err := Acc{}.Append(nil, m)
		if err != nil {
			return // a JSON accumulator can hold what the binary form refuses (none known)
		}
		m2, err := Acc{}.Decode(again)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("%x: %#v, then %#v, %v", b, m, m2, err)
		}
	})
}

// TestAccCheckAllocatesNothing: a restore checks every accumulator it reads
// with Check, which walks the value without building it; boxing its
// numbers allocated once per number.
func TestAccCheckAllocatesNothing(t *testing.T) {
	b, err := Acc{}.Append(nil, map[string]any{"count": 123456789, "sum": 2.5, "last": "x", "big": int64(1) << 40, "l": []any{1000, 2.25, "y"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := (Acc{}).Check(b); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Acc{}.Check(b) }); n != 0 {
		t.Errorf("Check allocates %.0f times per accumulator, want 0", n)
	}
}
