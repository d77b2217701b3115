package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Acc stores aggregate accumulators in the state store, read and
// written once per record. JSON text was a quarter of a keyed count's CPU
// (formatting and parsing numbers, allocating every key); this binary form
// costs a fraction of it. It decodes to exactly what a JSON round trip
// gives (whole numbers as int, invalid UTF-8 replaced), so that switching
// codec changes no result, and it still reads accumulators written as
// JSON, which start with '{'.
type Acc struct{}

const accBinary = 0x01 // first byte of the binary form

// Tags of encoded values.
const (
	accNil byte = iota
	accFalse
	accTrue
	accInt
	accFloat
	accString
	accList
	accMap
	accJSON // anything else, as JSON text
)

func (Acc) Append(dst []byte, v map[string]any) ([]byte, error) {
	dst = append(dst, accBinary)
	return appendAcc(dst, v)
}

func (Acc) Decode(src []byte) (map[string]any, error) {
	if len(src) == 0 || src[0] != accBinary {
		return AccJSON{}.Decode(src)
	}
	d := accDecoder{b: src, i: 1}
	x, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("accumulator: %w", err)
	}
	if d.i != len(d.b) {
		return nil, errors.New("accumulator: unexpected data after the value")
	}
	m, ok := x.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("accumulator is %T, not an object", x)
	}
	return m, nil
}

// Check fails where Decode would, without building the value: a restore
// checks every changelog record it reads, and building each accumulator
// only to drop it was most of that check's cost.
func (Acc) Check(src []byte) error {
	if len(src) == 0 || src[0] != accBinary {
		_, err := AccJSON{}.Decode(src)
		return err
	}
	d := accDecoder{b: src, i: 1, skip: true}
	if len(src) > 1 && src[1] != accMap {
		_, err := Acc{}.Decode(src)
		return err
	}
	if _, err := d.value(0); err != nil {
		return fmt.Errorf("accumulator: %w", err)
	}
	if d.i != len(d.b) {
		return errors.New("accumulator: unexpected data after the value")
	}
	return nil
}

func appendAcc(b []byte, x any) ([]byte, error) {
	switch t := x.(type) {
	case nil:
		return append(b, accNil), nil
	case bool:
		if t {
			return append(b, accTrue), nil
		}
		return append(b, accFalse), nil
	case int:
		return binary.AppendVarint(append(b, accInt), int64(t)), nil
	case int64:
		return binary.AppendVarint(append(b, accInt), t), nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, fmt.Errorf("unsupported value: %v", t)
		}
		// JSON writes a whole number below 1e21 without a fraction, and
		// reads it back as an int when it fits one.
		if n, ok := wholeFloat(t); ok {
			return binary.AppendVarint(append(b, accInt), n), nil
		}
		return binary.LittleEndian.AppendUint64(append(b, accFloat), math.Float64bits(t)), nil
	case string:
		if !utf8.ValidString(t) {
			break
		}
		b = binary.AppendUvarint(append(b, accString), uint64(len(t)))
		return append(b, t...), nil
	case []any:
		b = binary.AppendUvarint(append(b, accList), uint64(len(t)))
		for _, v := range t {
			var err error
			if b, err = appendAcc(b, v); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]any:
		for k := range t {
			if !utf8.ValidString(k) {
				return appendAccJSON(b, x)
			}
		}
		b = binary.AppendUvarint(append(b, accMap), uint64(len(t)))
		for k, v := range t {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			var err error
			if b, err = appendAcc(b, v); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return appendAccJSON(b, x)
}

// wholeFloat says whether JSON writes f as a whole number that reads back
// as an int, and which.
func wholeFloat(f float64) (int64, bool) {
	if f != math.Trunc(f) || math.Abs(f) >= 1e21 {
		return 0, false
	}
	if math.Abs(f) < 1<<53 {
		return int64(f), true
	}
	// Above 2^53 the text is the shortest that reads back as f, padded
	// with zeros: the int is that text's, not int64(f).
	n, err := strconv.ParseInt(string(strconv.AppendFloat(nil, f, 'f', -1, 64)), 10, 64)
	return n, err == nil
}

func appendAccJSON(b []byte, x any) ([]byte, error) {
	j, err := AppendJSON(nil, x)
	if err != nil {
		return nil, err
	}
	b = binary.AppendUvarint(append(b, accJSON), uint64(len(j)))
	return append(b, j...), nil
}

type accDecoder struct {
	b []byte
	i int
	// skip reads and checks values without building them: value returns
	// nil for each.
	skip bool
}

var errAccTruncated = errors.New("truncated")

func (d *accDecoder) uvarint() (uint64, error) {
	n, w := binary.Uvarint(d.b[d.i:])
	if w <= 0 {
		return 0, errAccTruncated
	}
	d.i += w
	return n, nil
}

func (d *accDecoder) bytes() ([]byte, error) {
	n, err := d.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(d.b)-d.i) {
		return nil, errAccTruncated
	}
	s := d.b[d.i : d.i+int(n)]
	d.i += int(n)
	return s, nil
}

// text reads a string, which the encoder only writes when valid UTF-8.
func (d *accDecoder) text() ([]byte, error) {
	s, err := d.bytes()
	if err == nil && !utf8.Valid(s) {
		err = fmt.Errorf("invalid UTF-8 in a string before byte %d", d.i)
	}
	return s, err
}

func (d *accDecoder) value(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	if d.i >= len(d.b) {
		return nil, errAccTruncated
	}
	tag := d.b[d.i]
	d.i++
	switch tag {
	case accNil:
		return nil, nil
	case accFalse:
		return false, nil
	case accTrue:
		return true, nil
	case accInt:
		n, w := binary.Varint(d.b[d.i:])
		if w <= 0 {
			return nil, errAccTruncated
		}
		d.i += w
		if d.skip {
			return nil, nil // boxing the number would allocate for nothing
		}
		return int(n), nil
	case accFloat:
		if len(d.b)-d.i < 8 {
			return nil, errAccTruncated
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.i:]))
		d.i += 8
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("unsupported number %v before byte %d", f, d.i)
		}
		if d.skip {
			return nil, nil
		}
		if n, ok := wholeFloat(f); ok {
			return int(n), nil
		}
		return f, nil
	case accString:
		s, err := d.text()
		if d.skip {
			return nil, err
		}
		return string(s), err
	case accList:
		n, err := d.uvarint()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(d.b)-d.i) { // every item takes a byte at least
			return nil, errAccTruncated
		}
		if d.skip {
			for range n {
				if _, err := d.value(depth + 1); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}
		l := make([]any, n)
		for i := range l {
			if l[i], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return l, nil
	case accMap:
		n, err := d.uvarint()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(d.b)-d.i)/2 { // a key length and a tag at least
			return nil, errAccTruncated
		}
		var m map[string]any
		if !d.skip {
			m = make(map[string]any, n)
		}
		for range n {
			k, err := d.text()
			if err != nil {
				return nil, err
			}
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if !d.skip {
				m[internKey(k)] = v
			}
		}
		return m, nil
	case accJSON:
		j, err := d.bytes()
		if err != nil {
			return nil, err
		}
		x, err := DecodeJSON(j)
		if d.skip {
			return nil, err
		}
		return x, err
	}
	return nil, fmt.Errorf("unknown tag %d at byte %d", tag, d.i-1)
}

// AccJSON stores accumulators as JSON with this package's codec, which
// keeps whole numbers as int.
type AccJSON struct{}

func (AccJSON) Append(dst []byte, v map[string]any) ([]byte, error) { return AppendJSON(dst, v) }
func (AccJSON) Decode(src []byte) (map[string]any, error) {
	x, err := DecodeJSON(src)
	if err != nil {
		return nil, err
	}
	m, ok := x.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("accumulator is %T, not an object", x)
	}
	return m, nil
}
