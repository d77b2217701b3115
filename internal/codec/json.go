package codec

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting, so hostile input cannot exhaust the stack.
const maxJSONDepth = 1000

// DecodeJSON decodes one JSON document into plain Go values: map[string]any,
// []any, string, bool, nil, and numbers as int when whole and within int64
// (so that `value.n % 2` works as users expect), float64 otherwise. It
// agrees with encoding/json on what is valid; it exists because decoding is
// the hot path of every pipeline that reads fields, and encoding/json's
// Decoder allocates a buffer per call.
func DecodeJSON(b []byte) (any, error) { return DecodeJSONFields(b, nil) }

type jsonDecoder struct {
	b []byte
	i int
	// keepRaw: members keeps the top-level fields rawScalar accepts as
	// read.
	keepRaw bool
}

// rawScalar reads the value at d.i if it is a string that needs no
// escaping (printable ASCII, none of '"', '\\', '<', '>' or '&') or an
// integer smallInt reads and AppendJSON would write as it stands (no
// "-0"), and returns its JSON as read. For anything else it returns nil
// and leaves d.i alone, for value to read it (and refuse it if invalid).
func (d *jsonDecoder) rawScalar() []byte {
	start := d.i
	if c := d.b[start]; c == '"' {
		i := start + 1
		i += htmlSafePrefix(d.b[i:])
		for ; i < len(d.b); i++ {
			c := d.b[i]
			if c == '"' {
				d.i = i + 1
				return d.b[start:d.i]
			}
			if !htmlSafe(c) {
				return nil
			}
		}
		return nil
	}
	b := d.b
	i := start
	if b[i] == '-' {
		i++
	}
	j := digitsEnd(b, i)
	switch n := j - i; {
	case n == 0 || n > 18:
		return nil
	case d.b[i] == '0' && (n > 1 || i > start): // 01 is refused, -0 written 0
		return nil
	case j < len(d.b) && (d.b[j] == '.' || d.b[j] == 'e' || d.b[j] == 'E'):
		return nil
	}
	d.i = j
	return d.b[start:j]
}

// htmlSafe reports whether appendJSONString writes c, an ASCII byte, as it
// is.
func htmlSafe(c byte) bool {
	return c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at byte %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) space() { d.i = ws(d.b, d.i) }

func (d *jsonDecoder) value(depth int) (any, error) {
	if d.i >= len(d.b) {
		return nil, d.errorf("unexpected end of input")
	}
	if depth > maxJSONDepth {
		return nil, d.errorf("nested deeper than %d", maxJSONDepth)
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth, nil)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	default:
		return nil, d.errorf("unexpected character %q", c)
	}
}

func (d *jsonDecoder) literal(s string) error {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return d.errorf("invalid literal")
	}
	d.i += len(s)
	return nil
}

// object reads an object. With a projection p it keeps only the fields p
// names, and checks the others without building them.
func (d *jsonDecoder) object(depth int, p *Projection) (any, error) {
	var m map[string]any
	if p != nil {
		m = make(map[string]any, len(p.names))
	} else {
		m = make(map[string]any)
	}
	if err := d.members(depth, p, func(k string, v any, _ []byte) { m[k] = v }); err != nil {
		return nil, err
	}
	return m, nil
}

// members reads the object at d.i, handing set each member p names (every
// member when p is nil), in document order: its value, or, with d.keepRaw,
// its JSON as read when rawScalar keeps it so (the value then nil).
func (d *jsonDecoder) members(depth int, p *Projection, set func(k string, v any, raw []byte)) error {
	d.i++ // {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return d.errorf("expected a string key")
		}
		var k string
		want := true
		var err error
		if p == nil {
			k, err = d.key()
		} else {
			k, want, err = d.projectedKey(p)
		}
		if err != nil {
			return err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return d.errorf("expected ':' after an object key")
		}
		d.i++
		d.space()
		if want {
			if err := d.member(depth+1, k, set); err != nil {
				return err
			}
		} else if err := d.skip(depth + 1); err != nil {
			return err
		}
		d.space()
		if d.i >= len(d.b) {
			return d.errorf("unexpected end of input in an object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return d.errorf("expected ',' or '}' in an object")
		}
	}
}

// member reads the value of member k, at depth, and hands it to set.
func (d *jsonDecoder) member(depth int, k string, set func(k string, v any, raw []byte)) error {
	if d.keepRaw && depth == 1 && d.i < len(d.b) { // top-level members only
		if raw := d.rawScalar(); raw != nil {
			set(k, nil, raw)
			return nil
		}
	}
	v, err := d.value(depth)
	if err != nil {
		return err
	}
	set(k, v, nil)
	return nil
}

func (d *jsonDecoder) array(depth int) (any, error) {
	d.i++ // [
	a := make([]any, 0, 4)
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end of input in an array")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return a, nil
		default:
			return nil, d.errorf("expected ',' or ']' in an array")
		}
	}
}

// keys interns object keys: records of a topic repeat the same few, and
// allocating each again was a tenth of decoding's allocations. Entries
// are replaced freely on collisions; a lookup only ever returns an equal
// string.
var keys [512]atomic.Pointer[string]

// key reads an object key.
func (d *jsonDecoder) key() (string, error) {
	start := d.i + 1
	for i := start; i < len(d.b) && i-start <= maxInterned; i++ {
		c := d.b[i]
		if c == '"' {
			d.i = i + 1
			return internKey(d.b[start:i]), nil
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
	}
	return d.str()
}

// maxInterned is the longest key interned.
const maxInterned = 32

// internKey returns b as a string, from keys when it is there. b must be
// valid UTF-8.
func internKey(b []byte) string {
	if len(b) > maxInterned {
		return string(b)
	}
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	slot := &keys[h%uint32(len(keys))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	k := string(b)
	slot.Store(&k)
	return k
}

func (d *jsonDecoder) str() (string, error) {
	d.i++ // "
	start := d.i
	// Fast path: no escapes, valid UTF-8. Long strings (a payload, a
	// padding) are scanned a word at a time up to the next quote.
	d.i += plainPrefix(d.b[d.i:])
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			s := d.b[start:d.i]
			d.i++
			if utf8.Valid(s) {
				return string(s), nil
			}
			return string([]rune(string(s))), nil // invalid bytes become U+FFFD, as encoding/json does
		}
		if c == '\\' || c < 0x20 {
			break
		}
		d.i++
	}
	buf := append(make([]byte, 0, d.i-start+16), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(buf) {
				return string([]rune(string(buf))), nil
			}
			return string(buf), nil
		case c < 0x20:
			return "", d.errorf("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			d.i++
			continue
		}
		d.i++ // backslash
		if d.i >= len(d.b) {
			break
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", d.errorf("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate must pair with a following \u low one;
				// a lone one becomes U+FFFD, as in encoding/json.
				save := d.i
				if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					d.i += 2
					if r2, ok := d.hex4(); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							buf = utf8.AppendRune(buf, dec)
							continue
						}
					}
				}
				d.i = save
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", d.errorf("invalid escape \\%c", e)
		}
	}
	return "", d.errorf("unterminated string")
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if len(d.b)-d.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.i += 4
	return r, true
}

// smallInt reads b, an optional minus and digits, when it has at most 18
// digits (so it fits an int64 without checking): most numbers in records
// are, and strconv wants a string, which cost an allocation each.
func smallInt(b []byte) (int, bool) {
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) > 18 {
		return 0, false
	}
	n := 0
	for len(b) >= 8 {
		n = n*100_000_000 + eightDigits(word(b[:8]))
		b = b[8:]
	}
	for _, c := range b {
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// digitsEnd returns where the ASCII digits from b[i] on end, testing
// eight at a time.
func digitsEnd(b []byte, i int) int {
	for len(b)-i >= 8 && eightDigitsAt(word(b[i:i+8])) {
		i += 8
	}
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// eightDigitsAt reports whether each byte of w is an ASCII digit: its high
// half 3, and still 3 with 6 added (which carries into it from 0x3a up).
func eightDigitsAt(w uint64) bool {
	const threes, sixes, highs = 0x3030303030303030, 0x0606060606060606, 0xf0f0f0f0f0f0f0f0
	return w&highs == threes && (w+sixes)&highs == threes
}

// eightDigits is the number w's eight bytes write as ASCII digits, the
// first in its lowest byte: pairs of digits, then of pairs, then of
// quadruples, are combined at once, three multiplications in all.
func eightDigits(w uint64) int {
	w -= 0x3030303030303030
	w = (w*10 + w>>8) & 0x00ff00ff00ff00ff
	w = (w*100 + w>>16) & 0x0000ffff0000ffff
	w = (w*10000 + w>>32) & 0xffffffff
	return int(w)
}

func (d *jsonDecoder) number() (any, error) {
	start := d.i
	whole, err := d.scanNumber()
	if err != nil {
		return nil, err
	}
	if whole {
		if n, ok := smallInt(d.b[start:d.i]); ok {
			return n, nil
		}
		if n, err := strconv.ParseInt(string(d.b[start:d.i]), 10, 64); err == nil {
			return int(n), nil
		}
	}
	s := string(d.b[start:d.i])
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		// Out of float64's range: encoding/json refuses it too.
		return nil, d.errorf("number %s out of range", s)
	}
	return f, nil
}

// skipNumber checks a number as number would, building nothing (but the
// string a fraction or exponent is parsed from, to check its range).
func (d *jsonDecoder) skipNumber() error {
	start := d.i
	whole, err := d.scanNumber()
	if err != nil {
		return err
	}
	if whole {
		if _, ok := smallInt(d.b[start:d.i]); ok {
			return nil
		}
	}
	s := string(d.b[start:d.i])
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return d.errorf("number %s out of range", s)
	}
	return nil
}

// scanNumber moves past the number at d.i, and reports whether it has
// neither a fraction nor an exponent.
func (d *jsonDecoder) scanNumber() (whole bool, err error) {
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		start := d.i
		d.i = digitsEnd(d.b, start)
		return d.i - start
	}
	if d.i >= len(d.b) {
		return false, d.errorf("invalid number")
	}
	if d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return false, d.errorf("invalid number")
	}
	whole = true
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		whole = false
		if digits() == 0 {
			return false, d.errorf("invalid number")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		whole = false
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return false, d.errorf("invalid number")
		}
	}
	return whole, nil
}

// AppendJSONFields appends fs as a JSON object, in their order, which must
// be sorted by name without duplicates for the result to be the one
// AppendJSON gives the equivalent map.
func AppendJSONFields(buf []byte, fs []Field) ([]byte, error) {
	buf = append(buf, '{')
	for i := range fs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, fs[i].Name)
		buf = append(buf, ':')
		if fs[i].Raw != nil {
			buf = append(buf, fs[i].Raw...)
			continue
		}
		var err error
		if buf, err = AppendJSON(buf, fs[i].Value); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// AppendJSON appends the JSON encoding of x to buf. It handles the plain
// values DecodeJSON and expressions produce (maps with string keys, lists,
// strings, numbers, bools, nil) itself, byte for byte as encoding/json would
// (sorted keys, the same escaping and number formats), and hands anything
// else to encoding/json.
func AppendJSON(buf []byte, x any) ([]byte, error) {
	switch t := x.(type) {
	case nil:
		return append(buf, "null"...), nil
	case bool:
		return strconv.AppendBool(buf, t), nil
	case string:
		return appendJSONString(buf, t), nil
	case int:
		return strconv.AppendInt(buf, int64(t), 10), nil
	case int64:
		return strconv.AppendInt(buf, t, 10), nil
	case float64:
		return appendJSONFloat(buf, t)
	case []any:
		buf = append(buf, '[')
		for i, v := range t {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = AppendJSON(buf, v); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case map[string]any:
		var small [16]string // most objects: no allocation for the sort
		keys := small[:0]
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf = append(buf, '{')
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, k)
			buf = append(buf, ':')
			var err error
			if buf, err = AppendJSON(buf, t[k]); err != nil {
				return nil, err
			}
		}
		return append(buf, '}'), nil
	}
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	return append(buf, b...), nil
}

func appendJSONFloat(buf []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("unsupported value: %v", f)
	}
	// As encoding/json: 'f' format, or 'e' for very small and large
	// magnitudes, with the exponent's leading zero cut ("1e-07" -> "1e-7").
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	buf = strconv.AppendFloat(buf, f, format, -1, 64)
	if format == 'e' {
		n := len(buf)
		if n >= 4 && buf[n-4] == 'e' && buf[n-3] == '-' && buf[n-2] == '0' {
			buf[n-2] = buf[n-1]
			buf = buf[:n-1]
		}
	}
	return buf, nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does, HTML-safe escapes
// included.
func appendJSONString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	// Most strings need no escape: skip their bulk a word at a time.
	for i := htmlSafePrefix(s); i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe(c) {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// plainPrefix returns how many bytes at the start of b need no attention
// inside a JSON string: none is a quote, a backslash or a control byte.
// It reads eight bytes at a time and stops at the first word holding one
// of them (the byte loop after it finds which).
func plainPrefix(b []byte) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	n := 0
	for len(b)-n >= 8 {
		w := binary.LittleEndian.Uint64(b[n:])
		// A byte's high bit is set in each term where that byte is below
		// 0x20, equal to '"' or equal to '\\' (and bytes of 0x80 and
		// above are masked out by ^w).
		ctl := w - 0x20*ones
		quote := (w ^ '"'*ones) - ones
		slash := (w ^ '\\'*ones) - ones
		if (ctl|quote|slash)&^w&highs != 0 {
			break
		}
		n += 8
	}
	return n
}

// htmlSafePrefix returns how many bytes at the start of s appendJSONString
// copies as they are, in whole eight-byte words: it stops at the first word
// holding a byte that is a quote, a backslash, a control byte, '<', '>',
// '&' or not ASCII (the byte loop after it decides). It tests four words a
// step with one branch, then finds the word among the last four. A 1 KB
// string field read as it stands and written back spent a fifth of a
// filter-map's CPU here.
func htmlSafePrefix[T string | []byte](s T) int {
	const highs = 0x8080808080808080
	n := 0
	for len(s)-n >= 32 {
		b := s[n : n+32]
		if (htmlUnsafeBits(word(b[0:8]))|htmlUnsafeBits(word(b[8:16]))|
			htmlUnsafeBits(word(b[16:24]))|htmlUnsafeBits(word(b[24:32])))&highs != 0 {
			break
		}
		n += 32
	}
	for len(s)-n >= 8 && htmlSafeWord(word(s[n:n+8])) {
		n += 8
	}
	return n
}

// word reads the eight bytes of b as a little-endian word, in one load.
func word[T string | []byte](b T) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// htmlSafeWord reports whether no byte of w is a quote, a backslash, a
// control byte, '<', '>', '&' or not ASCII.
func htmlSafeWord(w uint64) bool { return htmlUnsafeBits(w)&0x8080808080808080 == 0 }

// htmlUnsafeBits returns a word whose bytes' high bits are all clear when
// no byte of w is a quote, a backslash, a control byte, '<', '>', '&' or
// not ASCII, and not all clear otherwise.
func htmlUnsafeBits(w uint64) uint64 {
	const ones = 0x0101010101010101
	// With no high bit set, a byte's high bit is set in a term where the
	// byte is below 0x20, or equal to the term's character: '"' (0x22)
	// and '&' (0x26) are the bytes that read 0x26 with bit 2 set, '<'
	// (0x3c) and '>' (0x3e) those that read 0x3e with bit 1 set.
	t := w - 0x20*ones
	t |= (w ^ '\\'*ones) - ones
	t |= ((w | 0x04*ones) ^ '&'*ones) - ones
	t |= ((w | 0x02*ones) ^ '>'*ones) - ones
	return t | w
}

// Projection names the top-level fields of a JSON object that anything in
// the graph can read. Decoding builds only those: the others are checked,
// so a record is valid or not whatever the projection, but their strings,
// maps and lists are never made. A record of 1 KB whose steps read two
// small fields spent most of its decoding time on the one it never read.
type Projection struct {
	names []string
	set   map[string]int // index of each name, when there are many
	plain bool           // every name is a plainName
	// firsts holds, by byte, the names that start with it, a bit each
	// (names[i] is bit i), when there are at most eight.
	firsts [256]uint8
}

// maxSmallProjection is the most names a projection looks up one by one.
const maxSmallProjection = 8

func NewProjection(names []string) *Projection {
	p := &Projection{names: make([]string, len(names)), plain: true}
	for i, n := range names {
		p.names[i] = Intern(n)
		p.plain = p.plain && plainName(n)
		if n != "" && i < maxSmallProjection {
			p.firsts[n[0]] |= 1 << i
		}
	}
	if len(names) > maxSmallProjection {
		p.set = make(map[string]int, len(names))
		for i, n := range p.names {
			if _, dup := p.set[n]; !dup {
				p.set[n] = i
			}
		}
	}
	return p
}

// Names returns the fields p keeps.
func (p *Projection) Names() []string { return p.names }

// Len returns how many fields p keeps.
func (p *Projection) Len() int { return len(p.names) }

// has reports whether p keeps the field named b. It does not allocate.
func (p *Projection) has(b []byte) bool { return p.index(b) >= 0 }

// index returns the index of the field named b in p, -1 if p does not
// keep it. It does not allocate.
func (p *Projection) index(b []byte) int {
	if p.set != nil {
		if i, ok := p.set[string(b)]; ok {
			return i
		}
		return -1
	}
	for i, n := range p.names {
		if string(b) == n {
			return i
		}
	}
	return -1
}

// DecodeJSONFields is DecodeJSON building only the fields of a top-level
// object that p names; other documents, or a nil p, decode whole. It
// refuses exactly what DecodeJSON refuses.
func DecodeJSONFields(b []byte, p *Projection) (any, error) {
	d := jsonDecoder{b: b}
	d.space()
	var v any
	var err error
	if p != nil && d.i < len(d.b) && d.b[d.i] == '{' {
		v, err = d.object(0, p)
	} else {
		v, err = d.value(0)
	}
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, d.errorf("unexpected data after the JSON value")
	}
	return v, nil
}

// Field is a member of a decoded JSON object.
//
// A field DecodeJSONFieldList reads may be kept as it was read: a string
// that needs no escaping, or an integer that fits smallInt. Raw then holds
// its JSON, which AppendJSONFields copies as it is, and Value is nil until
// Decode builds it: most fields a step reads are compared or copied to the
// output unchanged, and building a string only to write it out again was a
// fifth of a filter-map's decoding and encoding.
type Field struct {
	Name  string
	Value any
	Raw   []byte
}

// Decode returns the field's value, building it from Raw on first use. It
// changes f: a Field shared by goroutines must be copied first.
func (f *Field) Decode() any {
	if f.Value == nil && f.Raw != nil {
		if f.Raw[0] == '"' {
			f.Value = string(f.Raw[1 : len(f.Raw)-1])
		} else {
			n, _ := smallInt(f.Raw)
			f.Value = n
		}
	}
	return f.Value
}

// RawInt returns the value of a field kept as read that is an integer,
// without building it; ok is false for any other field.
func (f *Field) RawInt() (n int, ok bool) {
	if len(f.Raw) == 0 || f.Raw[0] == '"' {
		return 0, false
	}
	return smallInt(f.Raw)
}

// DecodeJSONFieldList is DecodeJSONFields for a document that is an
// object, building a list of the fields p names rather than a map: each
// in the order first seen, with its last value, as the map would hold it.
// It appends them to buf. ok is false, and nothing is decoded, when the
// document is not an object (DecodeJSONFields decodes it). It refuses
// exactly what DecodeJSONFields refuses.
func DecodeJSONFieldList(b []byte, p *Projection, buf []Field) (fields []Field, ok bool, err error) {
	if p != nil {
		if fields, ok = quickFieldList(b, p, buf); ok {
			return fields, true, nil
		}
	}
	d := jsonDecoder{b: b, keepRaw: true}
	d.space()
	if p == nil || d.i >= len(d.b) || d.b[d.i] != '{' {
		return buf, false, nil
	}
	if fields, err = d.fieldList(p, buf); err != nil {
		return buf, true, err
	}
	d.space()
	if d.i != len(d.b) {
		return buf, true, d.errorf("unexpected data after the JSON value")
	}
	return fields, true, nil
}

// fieldList is members for DecodeJSONFieldList: it reads the object at
// d.i, appending to fields the members p names, as they are read when
// rawScalar keeps them so. It checks what it reads as members does, in
// the same order, so that it fails with the same error; it is a loop of
// its own, with no call per member to hand it on, no key interned (a
// field's name is p's) and no search of the fields for a name seen
// before: together they were half of decoding a 100-byte record for two
// of its fields.
func (d *jsonDecoder) fieldList(p *Projection, fields []Field) ([]Field, error) {
	base := len(fields)
	// at[i] is 1 + the index (from base) of p's field i in fields, 0
	// before it is seen.
	var at [maxSmallProjection]uint8
	d.i++ // {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return fields, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return fields, d.errorf("expected a string key")
		}
		idx, err := d.projectedIndex(p)
		if err != nil {
			return fields, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return fields, d.errorf("expected ':' after an object key")
		}
		d.i++
		d.space()
		if idx < 0 {
			if err := d.skip(1); err != nil {
				return fields, err
			}
		} else {
			var v any
			var raw []byte
			if d.i < len(d.b) {
				raw = d.rawScalar()
			}
			if raw == nil {
				if v, err = d.value(1); err != nil {
					return fields, err
				}
			}
			switch {
			case idx < len(at) && at[idx] != 0:
				f := &fields[base+int(at[idx])-1]
				f.Value, f.Raw = v, raw
			case idx < len(at):
				fields = append(fields, Field{p.names[idx], v, raw})
				at[idx] = uint8(len(fields) - base)
			default:
				fields = setField(fields, base, p.names[idx], v, raw)
			}
		}
		d.space()
		if d.i >= len(d.b) {
			return fields, d.errorf("unexpected end of input in an object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return fields, nil
		default:
			return fields, d.errorf("expected ',' or '}' in an object")
		}
	}
}

// setField sets the field named k of fields[base:] to v and raw, or
// appends it.
func setField(fields []Field, base int, k string, v any, raw []byte) []Field {
	for i := base; i < len(fields); i++ {
		if fields[i].Name == k {
			fields[i].Value, fields[i].Raw = v, raw
			return fields
		}
	}
	return append(fields, Field{k, v, raw})
}

// projectedIndex reads an object key and returns the index in p of the
// name it is, -1 for none. A key of plain ASCII is looked up as it
// stands; any other is decoded first, as key does.
func (d *jsonDecoder) projectedIndex(p *Projection) (int, error) {
	start := d.i + 1
	for i := start; i < len(d.b); i++ {
		c := d.b[i]
		if c == '"' {
			d.i = i + 1
			return p.index(d.b[start:i]), nil
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
	}
	k, err := d.key()
	if err != nil {
		return -1, err
	}
	return p.index([]byte(k)), nil
}

// projectedKey reads an object key and reports whether p names it,
// returning p's name for it when it does.
func (d *jsonDecoder) projectedKey(p *Projection) (string, bool, error) {
	idx, err := d.projectedIndex(p)
	if err != nil || idx < 0 {
		return "", false, err
	}
	return p.names[idx], true, nil
}

// skip checks the value at d.i as value(depth) would, building nothing.
func (d *jsonDecoder) skip(depth int) error {
	if d.i >= len(d.b) {
		return d.errorf("unexpected end of input")
	}
	if depth > maxJSONDepth {
		return d.errorf("nested deeper than %d", maxJSONDepth)
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.skipComposite(depth, '}', "an object")
	case c == '[':
		return d.skipComposite(depth, ']', "an array")
	case c == '"':
		return d.skipStr()
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.skipNumber()
	default:
		return d.errorf("unexpected character %q", c)
	}
}

// skipComposite skips an object (end '}') or an array (end ']').
func (d *jsonDecoder) skipComposite(depth int, end byte, what string) error {
	d.i++ // { or [
	d.space()
	if d.i < len(d.b) && d.b[d.i] == end {
		d.i++
		return nil
	}
	for {
		d.space()
		if end == '}' {
			if d.i >= len(d.b) || d.b[d.i] != '"' {
				return d.errorf("expected a string key")
			}
			if err := d.skipStr(); err != nil {
				return err
			}
			d.space()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return d.errorf("expected ':' after an object key")
			}
			d.i++
			d.space()
		}
		if err := d.skip(depth + 1); err != nil {
			return err
		}
		d.space()
		if d.i >= len(d.b) {
			return d.errorf("unexpected end of input in %s", what)
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case end:
			d.i++
			return nil
		default:
			return d.errorf("expected ',' or '%c' in %s", end, what)
		}
	}
}

// plainEnd returns where the bytes from b[i] on that need no attention
// inside a JSON string end (plainPrefix's), at a quote, a backslash, a
// control byte or the end of b. plainPrefix stops at the word holding the
// byte; the byte loop finds it (calling plainPrefix again for each byte of
// that word was most of skipping a short string).
func plainEnd(b []byte, i int) int {
	i += plainPrefix(b[i:])
	for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
		i++
	}
	return i
}

// skipStr checks a string as str would, building nothing.
func (d *jsonDecoder) skipStr() error {
	d.i++ // "
	for {
		d.i = plainEnd(d.b, d.i)
		if d.i >= len(d.b) {
			return d.errorf("unterminated string")
		}
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return nil
		case c < 0x20:
			return d.errorf("control character in a string")
		}
		d.i++ // backslash
		if d.i >= len(d.b) {
			return d.errorf("unterminated string")
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			// A surrogate's pair is a second escape, checked on its own.
			if _, ok := d.hex4(); !ok {
				return d.errorf("invalid \\u escape")
			}
		default:
			return d.errorf("invalid escape \\%c", e)
		}
	}
}
