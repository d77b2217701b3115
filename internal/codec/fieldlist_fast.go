package codec

import "math/bits"

// quickFieldList is DecodeJSONFieldList for the common document: an
// object of keys without escapes, with any whitespace between tokens. It
// keeps its place in locals rather than in a decoder, matches each key
// against p's names where it stands (rather than finding its end first and
// looking it up after), and reads the values it keeps as read
// (rawScalar's strings and integers) in line; others it decodes or skips
// with the decoder's own methods. On anything else (an escaped key, a
// document that is not an object, invalid JSON) it gives up, returning
// false and fields as given, and the caller decodes the document from its
// start the general way, which refuses it with the right error: this path
// accepts only what that one accepts, and builds the same fields. The
// general way took ~2,000 instructions to pick three fields of a 100-byte
// record, a third of a filter-map's per-record work before producing.
func quickFieldList(b []byte, p *Projection, fields []Field) ([]Field, bool) {
	if p.set != nil || !p.plain {
		return fields, false
	}
	base := len(fields)
	// at[i] is 1 + the index (from base) of p's field i in fields, 0
	// before it is seen.
	var at [maxSmallProjection]uint8
	n := len(b)
	i := ws(b, 0)
	if i >= n || b[i] != '{' {
		return fields[:base], false
	}
	i = ws(b, i+1)
	if i < n && b[i] == '}' {
		if ws(b, i+1) != n {
			return fields[:base], false
		}
		return fields, true
	}
	for {
		if i >= n || b[i] != '"' {
			return fields[:base], false
		}
		i++
		// The key: p's name that it is, if any, compared where it stands.
		idx := -1
		if i < n {
			// Only the names that start with the key's first byte, the
			// first of them first, as Projection.index finds them.
			for m := p.firsts[b[i]]; m != 0; m &= m - 1 {
				j := bits.TrailingZeros8(m)
				name := p.names[j]
				if e := i + len(name); e < n && b[e] == '"' && string(b[i:e]) == name {
					idx, i = j, e+1
					break
				}
			}
		}
		if idx < 0 {
			// Not one of p's, or escaped: find its end.
			for {
				if i >= n {
					return fields[:base], false
				}
				c := b[i]
				if c == '"' {
					break
				}
				if c == '\\' || c < 0x20 || c >= 0x80 {
					return fields[:base], false
				}
				i++
			}
			i++
		}
		i = ws(b, i)
		if i >= n || b[i] != ':' {
			return fields[:base], false
		}
		i = ws(b, i+1)
		if i >= n {
			return fields[:base], false
		}
		if idx < 0 {
			var ok bool
			if i, ok = skipValue(b, i); !ok {
				return fields[:base], false
			}
		} else {
			var v any
			var raw []byte
			if c := b[i]; c >= '1' && c <= '9' {
				// An integer rawScalar keeps as read, read here.
				if j := digitsEnd(b, i+1); j-i <= 18 && (j >= n || (b[j] != '.' && b[j] != 'e' && b[j] != 'E')) {
					raw, i = b[i:j], j
				}
			}
			if raw == nil {
				d := jsonDecoder{b: b, i: i, keepRaw: true}
				if raw = d.rawScalar(); raw == nil {
					var err error
					if v, err = d.value(1); err != nil {
						return fields[:base], false
					}
				}
				i = d.i
			}
			if at[idx] != 0 {
				f := &fields[base+int(at[idx])-1]
				f.Value, f.Raw = v, raw
			} else {
				fields = append(fields, Field{p.names[idx], v, raw})
				at[idx] = uint8(len(fields) - base)
			}
		}
		i = ws(b, i)
		if i >= n {
			return fields[:base], false
		}
		switch b[i] {
		case ',':
			i = ws(b, i+1)
		case '}':
			if ws(b, i+1) != n {
				return fields[:base], false
			}
			return fields, true
		default:
			return fields[:base], false
		}
	}
}

// plainName reports whether a key written as name's bytes, unescaped, is
// name: it has no quote, backslash, control byte or byte above ASCII
// (which the general decoder reads as UTF-8, replacing what is invalid).
// quickFieldList reads keys of projections whose names all are.
func plainName(name string) bool {
	if name == "" {
		return false // Projection.firsts has no entry for it
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

// ws returns where the JSON whitespace from b[i] on ends. Most calls find
// none: one comparison says so, inlined.
func ws(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i
	}
	return skipSpace(b, i)
}

// skipSpace is ws's loop (and the decoder's, through space).
func skipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue checks the value at b[i] as the decoder's skip does and
// returns where it ends; ok is false where skip would fail. Integers are
// read here, and strings without escapes; anything else by skip.
func skipValue(b []byte, i int) (end int, ok bool) {
	switch c := b[i]; {
	case c == '"':
		if j := plainEnd(b, i+1); j < len(b) && b[j] == '"' {
			return j + 1, true
		}
	case c >= '1' && c <= '9':
		j := digitsEnd(b, i+1)
		if j >= len(b) || (b[j] != '.' && b[j] != 'e' && b[j] != 'E') {
			return j, true
		}
	}
	d := jsonDecoder{b: b, i: i}
	if d.skip(1) != nil {
		return i, false
	}
	return d.i, true
}
