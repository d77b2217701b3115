package pipeline

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/pipeline-run/pipeline/internal/codec"
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
	raw []byte
	obj any
	// fields, when split, are the fields of a JSON object read through
	// Field: the object is built from them only if something asks for it
	// whole (Get). Most steps read a few fields, and a map per record
	// was a quarter of a keyed count's work.
	fields  []codec.Field
	proj    *codec.Projection // JSON: the only fields anything reads; nil for all
	format  Format
	decoded bool // obj holds the decoded raw
	split   bool // fields hold the decoded raw; obj is not built yet
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
	if v.split {
		m := make(map[string]any, len(v.fields))
		for i := range v.fields {
			m[v.fields[i].Name] = v.fields[i].Decode()
		}
		v.obj, v.decoded = m, true
		return m, nil
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
		x, err := codec.DecodeJSONFields(v.raw, v.proj)
		if err != nil {
			return nil, &DecodeError{Err: err}
		}
		v.obj = x
	}
	v.decoded = true
	return v.obj, nil
}

// Field returns the field called name of a value that is an object, and
// whether it is one. A JSON value is decoded on first use, as Get does,
// but of an object only the fields the graph reads are built, and no map
// unless Get is called too.
func (v *Value) Field(name string) (x any, isObject bool, err error) {
	if err := v.load(); err != nil {
		return nil, false, err
	}
	x, isObject = v.field(name)
	return x, isObject, nil
}

// load decodes the value as Field needs it, with the error Get gives.
func (v *Value) load() error { return v.loadIn(nil) }

// loadIn is load keeping the fields in b (nil: an allocation of their own).
func (v *Value) loadIn(b *DecodeBuffer) error {
	if v.decoded || v.split {
		return nil
	}
	if v.format == JSON && v.raw != nil && v.proj != nil {
		fields, isObject, err := codec.DecodeJSONFieldList(v.raw, v.proj, b.take(v.proj.Len()))
		if err != nil {
			return &DecodeError{Err: err}
		}
		if isObject {
			v.fields, v.split = fields, true
			return nil
		}
	}
	_, err := v.Get()
	return err
}

// field is Field of a loaded value.
func (v *Value) field(name string) (any, bool) {
	if v.split && !v.decoded {
		if f := v.fieldAt(name); f != nil {
			return f.Decode(), true
		}
		return nil, true
	}
	m, ok := v.obj.(map[string]any)
	if !ok {
		return nil, false
	}
	return m[name], true
}

// fieldAt returns the field called name of a split value; nil if it has
// none. The names of decoded fields and those expressions read are
// interned (codec.Intern): the field is found by comparing pointers, and
// by comparing bytes only when none is the same string. Comparing the
// bytes of every name was a twentieth of a filter-map's instructions.
func (v *Value) fieldAt(name string) *codec.Field {
	p := unsafe.StringData(name)
	for i := range v.fields {
		if f := &v.fields[i]; unsafe.StringData(f.Name) == p && len(f.Name) == len(name) {
			return f
		}
	}
	for i := range v.fields {
		if v.fields[i].Name == name {
			return &v.fields[i]
		}
	}
	return nil
}

// AppendJSON appends the JSON encoding of a value an operator set to buf,
// as Encode(JSON) returns it; ok is false where Encode returns the value as
// it is: unchanged, nil, or bytes already encoded.
func (v *Value) AppendJSON(buf []byte) (out []byte, ok bool, err error) {
	if !v.dirty {
		return nil, false, nil
	}
	if v.split && !v.decoded {
		out, err = codec.AppendJSONFields(buf, v.fields)
	} else {
		switch v.obj.(type) {
		case nil, []byte:
			return nil, false, nil
		}
		out, err = codec.AppendJSON(buf, v.obj)
	}
	if err != nil {
		return nil, true, fmt.Errorf("encoding JSON: %w", err)
	}
	return out, true, nil
}

// Set replaces the value.
func (v *Value) Set(x any) {
	v.obj, v.decoded, v.dirty = x, true, true
	v.raw, v.fields, v.split = nil, nil, false
}

// Replace replaces the value with w, a result of Evaluator.EvalValue,
// keeping the format v was read with.
func (v *Value) Replace(w Value) {
	f := v.format
	*v = w
	v.format = f
}

// setFields sets the value to the object of fields fs, sorted by name
// without duplicates: written out without a map, built only if something
// asks for the value whole.
func (v *Value) setFields(fs []codec.Field) {
	v.fields, v.split, v.dirty = fs, true, true
	v.obj, v.decoded, v.raw, v.proj = nil, false, nil, nil
}

// Format returns the format the value was read with.
func (v *Value) Format() Format { return v.format }

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
	if v.split && !v.decoded {
		if f == JSON {
			b, _, err := v.AppendJSON(nil)
			return b, err
		}
		v.Get() // cannot fail: the fields are there
	}
	return Encode(v.obj, f)
}

// Encode returns the bytes of x written with format f: JSON for JSON
// (a []byte is taken as already encoded), and for String and Bytes the
// string or bytes themselves (String writes other values with %v).
func Encode(x any, f Format) ([]byte, error) {
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
		b, err := codec.AppendJSON(nil, x)
		if err != nil {
			return nil, fmt.Errorf("encoding JSON: %w", err)
		}
		return b, nil
	}
}

// Record is one record moving through the graph. Operators may change it in
// place; an operator that emits several records from one must Clone it, and
// a copy must be made with Clone, never by copying the struct: a copy shares
// the input record as read, which a sink may take over (TakeOrigin).
type Record struct {
	Key       Value
	Value     Value
	Headers   []Header
	Timestamp time.Time

	// Source is where the input record this one derives from was read.
	Source Position
	// origin is the input record as read, for the dead-letter topic;
	// shared when a clone holds it too.
	origin *kgo.Record
	shared bool
}

// Decoding says how the records of a source are decoded: the formats of
// their keys and values, and which top-level fields of JSON values are
// built (the ones the graph reads; see Spec.ValueReads).
type Decoding struct {
	Key, Value Format
	proj       *codec.Projection // nil: every field
}

// NewDecoding returns the decoding of keys with format key and values with
// format value, building the top-level fields of JSON objects that reads
// names (all of them when reads.Whole).
func NewDecoding(key, value Format, reads ValueReads) *Decoding {
	d := &Decoding{Key: key, Value: value}
	if !reads.Whole {
		d.proj = codec.NewProjection(reads.Fields)
	}
	return d
}

// Reads returns the value fields d builds.
func (d *Decoding) Reads() ValueReads {
	if d.proj == nil {
		return ValueReads{Whole: true}
	}
	return ValueReads{Fields: d.proj.Names()}
}

// Decodes reports whether records read with d have JSON values whose
// fields the graph reads: worth decoding ahead (Record.Preload).
func (d *Decoding) Decodes() bool {
	return d.Value == JSON && (d.proj == nil || d.proj.Len() > 0)
}

// Preload decodes the value as far as reading a field would, so that
// another goroutine can do it ahead of the one that processes the record,
// keeping the fields read in b (nil: an allocation of the record's own).
// An error is not kept: the first read of a field decodes again and
// returns it, at the step that reads it.
func (rec *Record) Preload(b *DecodeBuffer) { _ = rec.Value.loadIn(b) }

// DecodeBuffer holds the fields of the values Preload decodes, those of
// many records to an allocation rather than one each. A record keeps its
// block of a few KB alive while it lives.
type DecodeBuffer struct {
	free  []codec.Field
	block []codec.Field // the latest allocation; free is its tail
}

// Reuse makes b hand out the memory of its latest allocation again, from
// the start. Nothing read or built through b before may be used after: a
// record whose fields it holds, a value built of them.
func (b *DecodeBuffer) Reuse() {
	clear(b.block[:len(b.block)-len(b.free)])
	b.free = b.block
}

// take returns room for n fields: a part of b with a capacity of its own,
// so that none grows into a neighbour's; its own allocation if b is nil.
func (b *DecodeBuffer) take(n int) []codec.Field {
	if b == nil {
		return make([]codec.Field, 0, n)
	}
	if len(b.free) < n {
		b.block = make([]codec.Field, max(decodeBlock, n))
		b.free = b.block
	}
	part := b.free[:0:n]
	b.free = b.free[n:]
	return part
}

// decodeBlock is how many fields a DecodeBuffer allocates at once: as
// many as fit in 32 KB, the largest allocation the allocator serves from
// its per-core caches; a larger one comes from the heap, cleared afresh.
const decodeBlock = 32 << 10 / int(unsafe.Sizeof(codec.Field{}))

// NewRecord builds a record read from r with the given formats, decoding
// every field of its value when asked.
func NewRecord(r *kgo.Record, keyFormat, valueFormat Format) *Record {
	rec := new(Record)
	rec.Read(r, &Decoding{Key: keyFormat, Value: valueFormat})
	return rec
}

// Read fills rec, which must be zero (fresh from a slab), from r as d
// says. Setting the fields one by one leaves the zero ones alone, where
// assigning a whole Record would write all of it again: the engine calls
// this once per input record.
func (rec *Record) Read(r *kgo.Record, d *Decoding) {
	rec.Key.raw, rec.Key.format = r.Key, d.Key
	rec.Value.raw, rec.Value.format, rec.Value.proj = r.Value, d.Value, d.proj
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
	r.shared = r.origin != nil
	c := *r
	if r.Headers != nil {
		c.Headers = append([]Header(nil), r.Headers...)
	}
	// Reading a field kept as read decodes it in place (Field.Decode),
	// and a clone may be read on another goroutine.
	c.Key.fields = slices.Clone(r.Key.fields)
	c.Value.fields = slices.Clone(r.Value.fields)
	return &c
}

// CopyWithoutValue copies r to dst, as Clone would, but for its value,
// which it leaves empty: for an operator that emits dst later with a value
// of its own and keeps nothing of r (a Forgetter). dst's headers are
// reused.
func (r *Record) CopyWithoutValue(dst *Record) {
	h := dst.Headers[:0]
	r.shared = r.origin != nil
	*dst = *r
	dst.Value = Value{}
	dst.Headers = nil
	if r.Headers != nil {
		dst.Headers = append(h, r.Headers...)
	}
	dst.Key.fields = slices.Clone(r.Key.fields)
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

// TakeOrigin returns the input record this one derives from and forgets it,
// if nothing else holds it (no clone of r shares it); else nil. A sink that
// writes r makes its output of it instead of allocating one: nothing reads
// the input record once its only derived record is written, and the
// dead-letter topic has no use for it then. Origin returns nil afterwards.
func (r *Record) TakeOrigin() *kgo.Record {
	if r.shared {
		return nil
	}
	o := r.origin
	r.origin = nil
	return o
}

// KeyBytes returns the record's key as bytes: as read when unchanged, else
// a string or bytes as they are and anything else as JSON; nil for none.
func (r *Record) KeyBytes() ([]byte, error) {
	if !r.Key.Changed() {
		return r.Key.Raw(), nil
	}
	k, _ := r.Key.Get()
	switch t := k.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(t), nil
	case []byte:
		return t, nil
	}
	return codec.AppendJSON(nil, k)
}

// ToTime reads a timestamp from an expression result: Unix milliseconds, an
// RFC 3339 string, or a time.Time.
func ToTime(x any) (time.Time, error) {
	switch t := x.(type) {
	case time.Time:
		return t, nil
	case int:
		return time.UnixMilli(int64(t)), nil
	case int64:
		return time.UnixMilli(t), nil
	case float64:
		return time.UnixMilli(int64(t)), nil
	case string:
		ts, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return time.Time{}, err
		}
		return ts, nil
	}
	return time.Time{}, fmt.Errorf("got %T, want Unix milliseconds or an RFC 3339 string", x)
}
