package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// referenceJSON is what DecodeJSON must agree with: encoding/json, with
// whole numbers as int.
func referenceJSON(b []byte) (any, error) {
	if !json.Valid(b) {
		return nil, errors.New("invalid")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil {
		return nil, err
	}
	return refNumbers(x), nil
}

func refNumbers(x any) any {
	switch t := x.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil && !strings.ContainsAny(string(t), ".eE") {
			return int(i)
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		for k, v := range t {
			t[k] = refNumbers(v)
		}
	case []any:
		for i, v := range t {
			t[i] = refNumbers(v)
		}
	}
	return x
}

var jsonCases = []string{
	`{"a":1,"b":[1,2.5,-3,1e3,-0,0.0],"c":{"d":null,"e":true,"f":false},"g":"x\"y\\z\/\b\f\n\r\t\u00e9\ud83d\ude00"}`,
	`  [ ]  `, `{}`, `"plain"`, `12345678901234567890`, `-9223372036854775808`, `9223372036854775807`,
	`"\ud83d"`, `"\ud83dx"`, `"\udc00\ud83d\ude00"`, "\"\xff\xfeok\"", `1.5e-7`, `0`, `-1`,
	// invalid
	`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `01`, `1.`, `.5`, `-`, `+1`, `1e`, `"abc`, `"\x"`, `"\u12"`, "\"a\x01\"",
	`tru`, `nul`, `[1 2]`, `{"a":1 "b":2}`, `1 2`, ``, `   `, `{1:2}`, `[`, `{`, `"\`,
	// long strings, scanned a word at a time: a special byte in each
	// position of a word, and bytes at and above 0x80
	`"0123456789abcdef\"0123456789"`, `"01234567\n89abcdef"`, `"0123456\\789abcdef0123"`,
	"\"012345678\x1f9abcdef\"", "\"0123456789abcde\x7f\x80\xff\xc3\xa9xyz0123456789\"",
	`"0123456789abcdef0123456789abcdef`, `{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","seq":1}`,
	"\"\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\\u00e9\xe2\x82\xac\"",
	// fields skipped when only some are decoded: valid and invalid values
	// of every kind, keys with escapes and bytes above 0x7f, repeated keys
	`{"seq":1,"pad":{"x":[1,{"y":"z"}],"e":{}},"a":[]}`, `{"s\u0065q":1,"pad":"x"}`, "{\"\xc3\xa9\":1,\"seq\":2}",
	`{"a":1,"a":2,"seq":3,"seq":{"b":4}}`, `{"pad":"\u00e9\ud83d\ude00\ud83d\u0041\\\/\b","seq":-1.5e3}`,
	`{"pad":"\x","seq":1}`, `{"pad":"\u12G4","seq":1}`, `{"pad":"\ud83d\u12G4","seq":1}`, "{\"pad\":\"a\x01\",\"seq\":1}",
	`{"pad":[1,],"seq":1}`, `{"pad":{"x" 1},"seq":1}`, `{"pad":{"x":1,},"seq":1}`, `{"pad":{1:2},"seq":1}`, `{"pad":01,"seq":1}`,
	`{"pad":1e400,"seq":1}`, `{"pad":tru,"seq":1}`, `{"pad":[1 2],"seq":1}`, `{"pad":"abc`, `{"pad":[`, `{"pad":{`, `{"pad":`,
	`{"seq":1,"pad":"x"} x`, `{"seq":1 "pad":2}`, `{"seq":1,}`, `{"pad":nul}`, `{"pad":-}`, `{"pad":"\`,
	// fields kept as read (plain strings, small integers) next to ones
	// that are not: escapes, HTML characters, -0, 19 digits, fractions
	`{"seq":0,"a":-0,"pad":"a<b"}`, `{"seq":123456789012345678,"a":1234567890123456789}`, `{"seq":-12,"a":"plain ~!"}`,
	`{"a":"x&y","seq":"\u0041"}`, `{"seq":00}`, `{"seq":-}`, `{"seq":1.5,"a":1e2}`, `{"seq":12"}`, `{"seq":"ab`, `{"seq":-01}`,
	`{"seq":"0123456789abcdefgh>","a":"0123456789abcdefghijklm"}`, "{\"seq\":\"\xc3\xa9\",\"a\":\"\x7f\"}", `{"seq":5,"seq":"x"}`,
}

// TestPlainPrefixStopsAtTheWordOfTheFirstSpecialByte: the word-at-a-time
// scan skips exactly the whole words before the first quote, backslash or
// control byte, never one holding such a byte.
func TestPlainPrefixStopsAtTheWordOfTheFirstSpecialByte(t *testing.T) {
	alphabet := []byte{'a', 'Z', '0', ' ', '!', '#', '[', ']', '"', '\\', 0, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			if rng.IntN(8) == 0 {
				b[i] = alphabet[8+rng.IntN(4)] // a special byte now and then
			} else {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		k := len(b)
		for i, c := range b {
			if c == '"' || c == '\\' || c < 0x20 {
				k = i
				break
			}
		}
		if got, want := plainPrefix(b), k/8*8; got != want {
			t.Fatalf("plainPrefix(%q) = %d, want %d", b, got, want)
		}
	}
}

// TestHTMLSafePrefixStopsAtTheWordOfTheFirstUnsafeByte: the scan that
// strings kept as read and written as they are rely on skips exactly the
// whole words before the first byte appendJSONString would escape, never
// one holding such a byte, for strings and byte slices alike, at every
// length around its two-word and one-word steps.
func TestHTMLSafePrefixStopsAtTheWordOfTheFirstUnsafeByte(t *testing.T) {
	alphabet := []byte{'a', 'Z', '0', ' ', '!', '#', '[', '~', '"', '\\', '<', '>', '&', 0, 0x1f, 0x7f, 0x80, 0xa2, 0xff, '=', '?', '%', '\'', 0x21, 0x3d, 0x3f}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = alphabet[rng.IntN(8)]
			if rng.IntN(24) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))] // now and then anything
			}
		}
		k := len(b)
		for i, c := range b {
			if !htmlSafe(c) {
				k = i
				break
			}
		}
		if got, want := htmlSafePrefix(b), k/8*8; got != want {
			t.Fatalf("htmlSafePrefix(%q) = %d, want %d", b, got, want)
		}
		if got, want := htmlSafePrefix(string(b)), k/8*8; got != want {
			t.Fatalf("htmlSafePrefix(string %q) = %d, want %d", b, got, want)
		}
	}
}

func TestDecodeJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range jsonCases {
		checkJSON(t, []byte(c))
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkJSON(t, b) })
}

func checkJSON(t *testing.T, b []byte) {
	t.Helper()
	got, gerr := DecodeJSON(b)
	want, werr := referenceJSON(b)
	if (gerr == nil) != (werr == nil) {
		if werr == nil && gerr != nil && strings.Contains(gerr.Error(), "out of range") {
			return // encoding/json makes such numbers ±Inf; we refuse them
		}
		t.Fatalf("%q: error %v, encoding/json says %v", b, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) && !nanEqual(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", b, got, want)
	}
	// Decoding a few fields refuses and keeps exactly what decoding all
	// of them does.
	checkProjected(t, b, nil)
	checkProjected(t, b, []string{"a", "seq"})
	// More names than a projection compares one by one.
	checkProjected(t, b, []string{"b", "c", "d", "e", "f", "g", "h", "i", "a", "seq"})
	if m, ok := got.(map[string]any); ok {
		for k := range m {
			checkProjected(t, b, []string{k})
			break
		}
	}
}

// checkProjected checks DecodeJSONFields(b) with the named fields against
// DecodeJSON(b): the same error or none, and the same top-level object
// with only those fields.
func checkProjected(t *testing.T, b []byte, names []string) {
	t.Helper()
	full, ferr := DecodeJSON(b)
	got, gerr := DecodeJSONFields(b, NewProjection(names))
	if (gerr == nil) != (ferr == nil) {
		t.Fatalf("%q with fields %q: error %v, decoding all says %v", b, names, gerr, ferr)
	}
	checkFieldList(t, b, names, got, gerr)
	if ferr != nil {
		return
	}
	want := full
	if m, ok := full.(map[string]any); ok && bytes.TrimLeft(b, " \t\r\n")[0] == '{' {
		kept := map[string]any{}
		for _, n := range names {
			if v, ok := m[n]; ok {
				kept[n] = v
			}
		}
		want = kept
	}
	if !reflect.DeepEqual(got, want) && !nanEqual(got, want) {
		t.Fatalf("%q with fields %q:\n got %#v\nwant %#v", b, names, got, want)
	}
}

// checkFieldList checks DecodeJSONFieldList(b) against what
// DecodeJSONFields gave (got, gerr): for an object, the same error, word
// for word, or the same fields, each once; for anything else, nothing.
func checkFieldList(t *testing.T, b []byte, names []string, got any, gerr error) {
	t.Helper()
	p := NewProjection(names)
	fields, isObject, err := DecodeJSONFieldList(b, p, nil)
	if !isObject {
		if len(fields) > 0 || err != nil {
			t.Fatalf("%q: not an object, yet %d fields (%v)", b, len(fields), err)
		}
		if _, isMap := got.(map[string]any); isMap && bytes.TrimLeft(b, " \t\r\n")[0] == '{' {
			t.Fatalf("%q is an object the list refused", b)
		}
		return
	}
	if (err == nil) != (gerr == nil) || (err != nil && err.Error() != gerr.Error()) {
		t.Fatalf("%q with fields %q: list error %v, map error %v", b, names, err, gerr)
	}
	if err != nil {
		return
	}
	m := map[string]any{}
	for _, f := range fields {
		if _, twice := m[f.Name]; twice {
			t.Fatalf("%q: field %q listed twice", b, f.Name)
		}
		if !p.has([]byte(f.Name)) {
			t.Fatalf("%q: field %q listed, not kept", b, f.Name)
		}
		m[f.Name] = f.Decode()
	}
	if !reflect.DeepEqual(any(m), got) && !nanEqual(any(m), got) {
		t.Fatalf("%q with fields %q:\nlist %#v\n map %#v", b, names, m, got)
	}
	// Written out (fields kept as read copied as they are), the list is
	// the map as AppendJSON writes it.
	slices.SortFunc(fields, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	for i := range fields {
		fields[i].Value = nil // those kept as read: from Raw alone
		if fields[i].Raw == nil {
			fields[i].Value = m[fields[i].Name]
		}
	}
	lw, lerr := AppendJSONFields(nil, fields)
	mw, merr := AppendJSON(nil, got)
	if (lerr == nil) != (merr == nil) || string(lw) != string(mw) {
		t.Fatalf("%q with fields %q: list written %s (%v), map %s (%v)", b, names, lw, lerr, mw, merr)
	}
}

func nanEqual(a, b any) bool {
	fa, ok1 := a.(float64)
	fb, ok2 := b.(float64)
	return ok1 && ok2 && math.IsNaN(fa) && math.IsNaN(fb)
}

func TestDecodeJSONRefusesDeepNesting(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	if _, err := DecodeJSON([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("got %v", err)
	}
	// A field nobody reads is skipped with the same bound.
	for _, open := range []string{"[", `{"x":`} {
		close := map[string]string{"[": "]", `{"x":`: "}"}[open]
		doc := `{"seq":1,"pad":` + strings.Repeat(open, 100000) + "1" + strings.Repeat(close, 100000) + "}"
		if _, err := DecodeJSONFields([]byte(doc), NewProjection([]string{"seq"})); err == nil || !strings.Contains(err.Error(), "nested deeper") {
			t.Fatalf("%s…: got %v", doc[:30], err)
		}
	}
	// Just within the bound, both decode it.
	ok := `{"seq":1,"pad":` + strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth) + "}"
	if _, err := DecodeJSON([]byte(ok)); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeJSONFields([]byte(ok), NewProjection([]string{"seq"})); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeJSONFieldsWithManyNames: past eight names the lookup is a map;
// it must find the same fields.
func TestDecodeJSONFieldsWithManyNames(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "seq"}
	p := NewProjection(names)
	if p.set == nil {
		t.Fatal("ten names are looked up in a list; the map path is not tested")
	}
	for _, c := range jsonCases {
		checkProjected(t, []byte(c), names)
	}
}

// TestDecodeJSONFieldsBuildsNothingItSkips: decoding the bench's 1 KB
// record for its two numbers makes the map and the two numbers, not the
// padding string, so it allocates less than decoding all of it.
func TestDecodeJSONFieldsBuildsNothingItSkips(t *testing.T) {
	padded := []byte(`{"seq":12345,"ts":1795955790878123,"pad":"` + strings.Repeat("x", 980) + `"}`)
	p := NewProjection([]string{"seq", "ts"})
	all := testing.AllocsPerRun(100, func() { _, _ = DecodeJSON(padded) })
	some := testing.AllocsPerRun(100, func() { _, _ = DecodeJSONFields(padded, p) })
	if some >= all {
		t.Fatalf("decoding seq and ts made %v allocations, decoding all %v", some, all)
	}
	v, err := DecodeJSONFields(padded, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"seq": 12345, "ts": 1795955790878123}; !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v", v)
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	doc := []byte(`{"sensor":"sensor-07","temperature":23.51,"ts":1795955790878,"seq":12345,"tags":["a","b"],"loc":{"lat":52.1,"lon":4.3}}`)
	b.Run("ours", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeJSON(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The bench tool's 1 KB records: two numbers and a padding string.
	padded := []byte(`{"seq":12345,"ts":1795955790878123,"pad":"` + strings.Repeat("x", 980) + `"}`)
	b.Run("ours-1KB-padded", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(padded)))
		for b.Loop() {
			if _, err := DecodeJSON(padded); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The keyed-count arm reads seq and ts of it.
	seqTS := NewProjection([]string{"seq", "ts"})
	b.Run("ours-1KB-padded-2-fields", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(padded)))
		for b.Loop() {
			if _, err := DecodeJSONFields(padded, seqTS); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The bench's 100-byte records as its steps read them: the keyed
	// count reads seq and ts, the filter-map seq, ts and pad.
	small := []byte(`{"seq":12345678,"ts":1795955790878123,"pad":"` + strings.Repeat("x", 50) + `"}`)
	for _, names := range [][]string{{"seq", "ts"}, {"seq", "ts", "pad"}} {
		p := NewProjection(names)
		b.Run("ours-100B-list-"+strings.Join(names, "-"), func(b *testing.B) {
			b.ReportAllocs()
			var buf []Field
			for b.Loop() {
				fs, _, err := DecodeJSONFieldList(small, p, buf[:0])
				if err != nil {
					b.Fatal(err)
				}
				buf = fs
			}
		})
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := referenceJSON(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestAppendJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range jsonCases {
		checkEncode(t, []byte(c))
	}
	for _, x := range []any{1e21, 1e-7, 123456789.0, -0.0, 0.1, "<a&b>\u2028\u2029\x7f", map[string]any{"b": 1, "a": []any{nil, true}}, int64(5)} {
		want, _ := json.Marshal(x)
		got, err := AppendJSON(nil, x)
		if err != nil || string(got) != string(want) {
			t.Errorf("%#v: got %s (%v), want %s", x, got, err, want)
		}
	}
}

func FuzzAppendJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkEncode(t, b) })
}

// checkEncode decodes b and encodes it back both ways: the bytes must match.
func checkEncode(t *testing.T, b []byte) {
	t.Helper()
	x, err := DecodeJSON(b)
	if err != nil {
		return
	}
	want, werr := json.Marshal(x)
	got, gerr := AppendJSON(nil, x)
	if (werr == nil) != (gerr == nil) || string(got) != string(want) {
		t.Fatalf("%q: got %s (%v), encoding/json %s (%v)", b, got, gerr, want, werr)
	}
}

func BenchmarkEncodeJSON(b *testing.B) {
	x, _ := DecodeJSON([]byte(`{"sensor":"sensor-07","temperature":23.51,"ts":1795955790878,"seq":12345,"tags":["a","b"],"loc":{"lat":52.1,"lon":4.3}}`))
	b.Run("ours", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := AppendJSON(nil, x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(x); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendJSONStringEveryByteEverywhere puts each byte value at each
// position of ASCII strings long enough for the word-at-a-time skip: the
// encoding must match encoding/json's wherever the byte falls.
func TestAppendJSONStringEveryByteEverywhere(t *testing.T) {
	base := []byte("abcdefghijklmnopqrstuvwxy")
	for c := range 256 {
		for pos := range base {
			b := slices.Clone(base)
			b[pos] = byte(c)
			s := string(b)
			want, _ := json.Marshal(s)
			if got := appendJSONString(nil, s); string(got) != string(want) {
				t.Fatalf("byte %#x at %d: got %s, want %s", c, pos, got, want)
			}
		}
	}
	// A rune of several bytes across a word's edge.
	for pos := range base {
		s := string(base[:pos]) + "é\u2028" + string(base[pos:])
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("runes at %d: got %s, want %s", pos, got, want)
		}
	}
}

// TestFieldListKeepsPlainFieldsAsRead: of the bench's record, the numbers
// and the padding are kept as read, with nothing built until asked, and
// a fraction or a string with an escape is built as before.
func TestFieldListKeepsPlainFieldsAsRead(t *testing.T) {
	b := []byte(`{"seq":-12345,"ts":1795955790878123,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","f":1.5,"e":"a\nb"}`)
	p := NewProjection([]string{"seq", "ts", "pad", "f", "e"})
	buf := make([]Field, 0, 5)
	all := testing.AllocsPerRun(100, func() { _, _, _ = DecodeJSONFieldList(b, p, buf) })
	two := NewProjection([]string{"f", "e"})
	built := testing.AllocsPerRun(100, func() { _, _, _ = DecodeJSONFieldList(b, two, buf) })
	if all != built || built == 0 {
		t.Fatalf("decoding five fields, three of them kept as read, made %v allocations; the two built alone %v", all, built)
	}
	fields, _, err := DecodeJSONFieldList(b, p, buf)
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]string{"seq": "-12345", "ts": "1795955790878123", "pad": `"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"`}
	for i := range fields {
		f := &fields[i]
		if want, ok := raw[f.Name]; ok != (f.Raw != nil) || string(f.Raw) != want || (ok && f.Value != nil) {
			t.Fatalf("%s: raw %q, value %#v; want raw %q", f.Name, f.Raw, f.Value, want)
		}
	}
	if n, ok := fields[0].RawInt(); !ok || n != -12345 {
		t.Fatalf("seq's RawInt: %d, %v", n, ok)
	}
	if _, ok := fields[2].RawInt(); ok {
		t.Fatal("a string read as an integer")
	}
	if v := fields[2].Decode(); v != strings.Repeat("x", 34) || fields[2].Value == nil {
		t.Fatalf("pad decoded to %#v, and kept? %v", v, fields[2].Value != nil)
	}
	if v := fields[1].Decode(); v != 1795955790878123 {
		t.Fatalf("ts decoded to %#v", v)
	}
}

// BenchmarkHTMLSafePrefix scans a 1 KB string field with nothing to
// escape, as a 1 KB record's padding is read and written.
func BenchmarkHTMLSafePrefix(b *testing.B) {
	s := bytes.Repeat([]byte("x"), 1024)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if htmlSafePrefix(s) != len(s) {
			b.Fatal("unsafe")
		}
	}
}

// TestSmallIntReadsWhatStrconvWrites: every length of 1 to 18 digits, with
// and without a minus, and the digit patterns that carry between the
// eight-digit groups, read back as the int written.
func TestSmallIntReadsWhatStrconvWrites(t *testing.T) {
	ns := []int{0, 1, 9, 10, 99, 12345678, 99999999, 100000000, 999999999999999999, 100000000000000000, 123456789012345678}
	for d := 1; d <= 18; d++ {
		x := 1
		for range d - 1 {
			x *= 10
		}
		ns = append(ns, x, x*10-1, x+x/3, x*9+x-1-x/7)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		ns = append(ns, int(rnd.Int64N(1_000_000_000_000_000_000)))
	}
	for _, n := range ns {
		for _, x := range []int{n, -n} {
			b := strconv.AppendInt(nil, int64(x), 10)
			if got, ok := smallInt(b); !ok || got != x {
				t.Fatalf("smallInt(%s) = %d, %v", b, got, ok)
			}
		}
	}
	if _, ok := smallInt([]byte("1234567890123456789")); ok {
		t.Error("19 digits read")
	}
}

// TestEightDigitsAt: a word is eight digits exactly when each of its bytes
// is '0' to '9', whichever byte is not.
func TestEightDigitsAt(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			b := []byte("50505050")
			b[pos] = byte(c)
			want := c >= '0' && c <= '9'
			if got := eightDigitsAt(word(b)); got != want {
				t.Fatalf("%q: %v, want %v", b, got, want)
			}
		}
	}
}
