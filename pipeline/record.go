package pipeline

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Format says how the bytes of a key or value are read and written.
type Format uint8

const (
	// JSON values decode to map[string]any, []any, string, float64, bool or nil.
	JSON Format = iota
	// String values decode to a Go string.
	String
	// Bytes values decode to a []byte, untouched.
	Bytes
)

// ParseFormat turns a config format name into a Format.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "json":
		return JSON, nil
	case "string":
		return String, nil
	case "bytes":
		return Bytes, nil
	}
	return 0, fmt.Errorf("unknown format %q (want json, string or bytes)", s)
}

func (f Format) String() string {
	switch f {
	case JSON:
		return "json"
	case String:
		return "string"
	case Bytes:
		return "bytes"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Position is where a record was read: its source topic, partition and offset.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (p Position) String() string {
	return fmt.Sprintf("%s/%d@%d", p.Topic, p.Partition, p.Offset)
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Value is a record key or value that is decoded only when something asks
// for its fields and encoded again only when something changed it. A
// pass-through pipeline therefore never parses JSON.
type Value struct {
	raw     []byte
	obj     any
	proj    *projection // JSON: the only fields anything reads; nil for all
	format  Format
	decoded bool // obj holds the decoded raw
	dirty   bool // obj was set by an operator; raw is stale
}

// RawValue returns a Value holding b, read with format f when needed.
func RawValue(b []byte, f Format) Value { return Value{raw: b, format: f} }

// ObjectValue returns a Value holding an already decoded Go value.
func ObjectValue(v any) Value { return Value{obj: v, decoded: true, dirty: true} }

// Get returns the decoded value, decoding it on first use. A JSON object
// read by the runtime holds only the top-level fields the graph's
// expressions name, unless some step of the graph is not a built-in one:
// a custom operator always sees every field.
func (v *Value) Get() (any, error) {
	if v.decoded {
		return v.obj, nil
	}
	switch v.format {
	case String:
		v.obj = string(v.raw)
	case Bytes:
		v.obj = v.raw
	default:
		if v.raw == nil {
			v.obj = nil
			break
		}
		x, err := decodeJSONFields(v.raw, v.proj)
		if err != nil {
			return nil, &DecodeError{Err: err}
		}
		v.obj = x
	}
	v.decoded = true
	return v.obj, nil
}

// Set replaces the value.
func (v *Value) Set(x any) {
	v.obj, v.decoded, v.dirty = x, true, true
	v.raw = nil
}

// Changed reports whether an operator replaced the value since it was read.
func (v *Value) Changed() bool { return v.dirty }

// Raw returns the bytes as read, or nil when the value was replaced.
func (v *Value) Raw() []byte {
	if v.dirty {
		return nil
	}
	return v.raw
}

// Encode returns the bytes to write with format f. An unchanged value is
// written as it was read, whatever f says: re-encoding it could only lose
// information.
func (v *Value) Encode(f Format) ([]byte, error) {
	if !v.dirty {
		return v.raw, nil
	}
	return encode(v.obj, f)
}

func encode(x any, f Format) ([]byte, error) {
	if x == nil {
		return nil, nil
	}
	switch f {
	case String, Bytes:
		switch t := x.(type) {
		case string:
			return []byte(t), nil
		case []byte:
			return t, nil
		case fmt.Stringer:
			return []byte(t.String()), nil
		}
		if f == Bytes {
			return nil, fmt.Errorf("cannot write %T as bytes", x)
		}
		return fmt.Appendf(nil, "%v", x), nil
	default:
		if b, ok := x.([]byte); ok {
			// Already encoded (for example by a custom operator).
			return b, nil
		}
		b, err := appendJSON(nil, x)
		if err != nil {
			return nil, fmt.Errorf("encoding JSON: %w", err)
		}
		return b, nil
	}
}

// Record is one record moving through the graph. Operators may change it in
// place; an operator that emits several records from one must Clone it.
type Record struct {
	Key       Value
	Value     Value
	Headers   []Header
	Timestamp time.Time

	// Source is where the input record this one derives from was read.
	Source Position
	// origin is the input record as read, for the dead-letter topic.
	origin *kgo.Record
}

// NewRecord builds a record read from r with the given formats.
func NewRecord(r *kgo.Record, keyFormat, valueFormat Format) *Record {
	rec := new(Record)
	rec.init(r, keyFormat, valueFormat)
	return rec
}

// init fills rec, which must be zero (fresh from a slab), from r. Setting
// the fields one by one leaves the zero ones alone, where assigning a whole
// Record would write all of it again: this runs once per input record.
func (rec *Record) init(r *kgo.Record, keyFormat, valueFormat Format) {
	rec.Key.raw, rec.Key.format = r.Key, keyFormat
	rec.Value.raw, rec.Value.format = r.Value, valueFormat
	rec.Timestamp = r.Timestamp
	rec.Source = Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	rec.origin = r
	if len(r.Headers) > 0 {
		rec.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
}

// Clone returns a copy that can be changed without changing r. Decoded
// values are shared: operators must replace them with Set, never mutate them.
func (r *Record) Clone() *Record {
	c := *r
	if r.Headers != nil {
		c.Headers = append([]Header(nil), r.Headers...)
	}
	return &c
}

// Header returns the value of the last header named k.
func (r *Record) Header(k string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == k {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}

// SetHeader replaces every header named k with one holding v.
func (r *Record) SetHeader(k string, v []byte) {
	out := r.Headers[:0:0]
	for _, h := range r.Headers {
		if h.Key != k {
			out = append(out, h)
		}
	}
	r.Headers = append(out, Header{Key: k, Value: v})
}

// Origin returns the input record this one derives from, as it was read.
func (r *Record) Origin() *kgo.Record { return r.origin }
