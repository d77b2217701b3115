package pipeline

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting, so hostile input cannot exhaust the stack.
const maxJSONDepth = 1000

// decodeJSON decodes one JSON document into plain Go values: map[string]any,
// []any, string, bool, nil, and numbers as int when whole and within int64
// (so that `value.n % 2` works as users expect), float64 otherwise. It
// agrees with encoding/json on what is valid; it exists because decoding is
// the hot path of every pipeline that reads fields, and encoding/json's
// Decoder allocates a buffer per call.
func decodeJSON(b []byte) (any, error) {
	d := jsonDecoder{b: b}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, d.errorf("unexpected data after the JSON value")
	}
	return v, nil
}

type jsonDecoder struct {
	b []byte
	i int
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at byte %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(depth int) (any, error) {
	if d.i >= len(d.b) {
		return nil, d.errorf("unexpected end of input")
	}
	if depth > maxJSONDepth {
		return nil, d.errorf("nested deeper than %d", maxJSONDepth)
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
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

func (d *jsonDecoder) object(depth int) (any, error) {
	d.i++ // {
	m := make(map[string]any)
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errorf("expected a string key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errorf("expected ':' after an object key")
		}
		d.i++
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end of input in an object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return m, nil
		default:
			return nil, d.errorf("expected ',' or '}' in an object")
		}
	}
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

func (d *jsonDecoder) str() (string, error) {
	d.i++ // "
	start := d.i
	// Fast path: no escapes, valid UTF-8.
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

func (d *jsonDecoder) number() (any, error) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i >= len(d.b) {
		return nil, d.errorf("invalid number")
	}
	if d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, d.errorf("invalid number")
	}
	whole := true
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		whole = false
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		whole = false
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	s := string(d.b[start:d.i])
	if whole {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return int(n), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		// Out of float64's range: encoding/json refuses it too.
		return nil, d.errorf("number %s out of range", s)
	}
	return f, nil
}
