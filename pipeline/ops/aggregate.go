package ops

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// aggregate keeps, per record key, a set of named aggregations and emits
// the key's current values:
//
//	aggregate:
//	  fields:
//	    readings: count
//	    total:    {sum: value.amount}
//	    hottest:  {max: value.temp}
//	    mean:     {avg: value.temp}
//	    seen:     {first: value.ts}
//	    latest:   {last: value}
//	    recent:   {collect: value.id, max: 10}
//	    custom:   {reduce: "state + value.n", init: "0"}
//	  emit: update        # or checkpoint: the changed keys once per checkpoint
//	  ttl: 24h            # forget keys not updated for this long
//	  ttl_update: on_write # or on_read_and_write
//
// Its state is exactly-once with the outputs: it lives in a state.Store
// whose changes go to a changelog topic inside each checkpoint's
// transaction. Records are aggregated by their key, which must be the key
// they are partitioned by: the source's, or a key_by step's before it (a
// map or flat_map that sets the key without key_by is refused at build).
type aggregate struct {
	fields    []aggField
	emit      string
	ttl       time.Duration
	ttlUpdate state.TTLUpdate
	fp        string
}

type aggKind string

const (
	aggCount   aggKind = "count"
	aggSum     aggKind = "sum"
	aggMin     aggKind = "min"
	aggMax     aggKind = "max"
	aggAvg     aggKind = "avg"
	aggFirst   aggKind = "first"
	aggLast    aggKind = "last"
	aggCollect aggKind = "collect"
	aggReduce  aggKind = "reduce"
)

var aggKinds = []aggKind{aggCount, aggSum, aggMin, aggMax, aggAvg, aggFirst, aggLast, aggCollect, aggReduce}

type aggField struct {
	name     string
	jsonName []byte // name as a JSON string, and a colon
	kind     aggKind
	expr     *pipeline.Expr // the value folded in; nil for a bare count
	init     *pipeline.Expr // reduce's initial state
	max      int            // collect's bound
}

type aggregateSpec struct {
	Fields    map[string]any `yaml:"fields"`
	Emit      string         `yaml:"emit"`
	TTL       time.Duration  `yaml:"ttl"`
	TTLUpdate string         `yaml:"ttl_update"`
}

const defaultCollectMax = 100

func newAggregate(s *pipeline.Spec) (pipeline.Definition, error) {
	var as aggregateSpec
	if !s.Decode(&as) {
		return nil, nil
	}
	a := &aggregate{emit: cmp.Or(as.Emit, "update"), ttl: as.TTL}
	if a.emit != "update" && a.emit != "checkpoint" {
		s.Errorf(".emit", "must be update or checkpoint, found %q", as.Emit)
	}
	switch as.TTLUpdate {
	case "", "on_write":
		a.ttlUpdate = state.OnCreateAndWrite
	case "on_read_and_write":
		a.ttlUpdate = state.OnReadAndWrite
	default:
		s.Errorf(".ttl_update", "must be on_write (the default: a key lives ttl after its last update) or on_read_and_write, found %q", as.TTLUpdate)
	}
	if len(as.Fields) == 0 {
		s.Errorf(".fields", "required: at least one aggregation, e.g. {count: count}")
		return nil, nil
	}
	a.fields = parseFields(s, ".fields", as.Fields)
	a.fp = "aggregate:v1:" + fieldsHash(a.fields)
	return a, nil
}

// parseFields reads the aggregations of fields, at sub of s's path.
func parseFields(s *pipeline.Spec, sub string, fields map[string]any) []aggField {
	var out []aggField
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		fsub := sub + "." + name
		f := aggField{name: name}
		if q, err := codec.AppendJSON(nil, name); err == nil {
			f.jsonName = append(q, ':')
		}
		switch v := fields[name].(type) {
		case string:
			if v != string(aggCount) {
				s.Errorf(fsub, "a bare string must be count; give other aggregations as {sum: expression} and the like")
				continue
			}
			f.kind = aggCount
		case map[string]any:
			// "max" is an aggregation, and collect's bound.
			_, isCollect := v[string(aggCollect)]
			var kinds []string
			for k := range v {
				switch {
				case k == "init" || (k == "max" && isCollect):
				case slices.Contains(aggKinds, aggKind(k)):
					kinds = append(kinds, k)
				default:
					s.Errorf(fsub+"."+k, "unknown key (want one of count, sum, min, max, avg, first, last, collect, reduce)")
				}
			}
			slices.Sort(kinds)
			if len(kinds) != 1 {
				s.Errorf(fsub, "expected exactly one aggregation, found %v", kinds)
				continue
			}
			f.kind = aggKind(kinds[0])
			src, ok := v[kinds[0]].(string)
			if !ok {
				s.Errorf(fsub+"."+kinds[0], "expected an expression string, got %s", pipeline.Describe(v[kinds[0]]))
				continue
			}
			f.expr = s.Expr(fsub+"."+kinds[0], src, pipeline.AnyResult)
			if f.kind == aggCollect {
				f.max = defaultCollectMax
				if m, ok := v["max"]; ok {
					n, ok := pipeline.AsInt(m)
					if !ok || n < 1 {
						s.Errorf(fsub+".max", "must be a whole number, at least 1")
					}
					f.max = n
				}
			}
			if f.kind == aggReduce {
				init, ok := v["init"].(string)
				if !ok {
					s.Errorf(fsub+".init", "required with reduce: the expression of the first state")
					continue
				}
				f.init = s.Expr(fsub+".init", init, pipeline.AnyResult)
			} else if _, ok := v["init"]; ok {
				s.Errorf(fsub+".init", "only reduce takes init")
			}
		default:
			s.Errorf(fsub, "expected count or {aggregation: expression}, got %s", pipeline.Describe(v))
			continue
		}
		out = append(out, f)
	}
	return out
}

// fieldsHash identifies fields, for a fingerprint: what gives an
// aggregation's state its meaning is the fields, their kinds and
// expressions. Changing them makes old state unreadable or wrong, so it is
// refused at start-up.
func fieldsHash(fields []aggField) string {
	h := sha256.New()
	for _, f := range fields {
		fmt.Fprintf(h, "%s|%s|", f.name, f.kind)
		if f.expr != nil {
			h.Write([]byte(f.expr.String()))
		}
		if f.init != nil {
			h.Write([]byte("|" + f.init.String()))
		}
		fmt.Fprintf(h, "|%d;", f.max)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

func (a *aggregate) Outputs() []string   { return nil }
func (a *aggregate) Fingerprint() string { return a.fp }

// KeepsNoRecords: emitting on every update, the operator emits the record
// it folded before Process returns; emitting at checkpoints, it keeps a
// copy of each changed key's last record, made with CopyWithoutValue, not
// the record (pipeline.Forgetter).
func (a *aggregate) KeepsNoRecords() bool { return true }

// KeepsNoInput: emitting on every update, the operator keeps its keys as
// copies and accumulators of decoded values, and copies the []byte of a
// first, last or collect of a record read in the bytes format (detach);
// emitting at checkpoints, its copies of last records share their bytes.
// A reduce's state can be anything its expression builds
// (pipeline.InputForgetter).
func (a *aggregate) KeepsNoInput() bool { return a.emit != "checkpoint" && !hasReduce(a.fields) }

// hasReduce reports whether any of fields is a reduce.
func hasReduce(fields []aggField) bool {
	return slices.ContainsFunc(fields, func(f aggField) bool { return f.kind == aggReduce })
}

// MergesInputs: with emit: checkpoint, one output stands for every input
// of its key in the checkpoint.
func (a *aggregate) MergesInputs() (sub, what, instead string) {
	if a.emit != "checkpoint" {
		return "", "", ""
	}
	return ".emit", "emit: checkpoint writes one record for many inputs", "use emit: update"
}

func (a *aggregate) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, fmt.Errorf("aggregate needs a state store")
}

func (a *aggregate) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	ttl := state.TTLConfig{TTL: a.ttl, Update: a.ttlUpdate}
	v, err := state.NewValue[map[string]any](st, "acc", ttl, state.WithCodec[map[string]any](codec.Acc{}))
	if err != nil {
		return nil, err
	}
	op := &aggregateOp{def: a, st: st, acc: v, dirty: map[string]*lastRecord{}}
	if a.ttl == 0 {
		// A cached accumulator would not expire: no cache with a TTL.
		op.cache = newKeyTable[aggEntry]()
	}
	return op, nil
}

type aggregateOp struct {
	def *aggregate
	st  *state.Store
	acc *state.Value[map[string]any]
	// dirty holds, with emit: checkpoint and a TTL, a copy of the last
	// record of every key changed since the last checkpoint
	// (CopyWithoutValue). Through a pointer, so
	// that a key changed again is updated without making its string again.
	// Without a TTL, changed does (aggEntry.last).
	dirty   map[string]*lastRecord
	changed []*aggEntry
	// cache holds the accumulators of the keys changed since the last
	// checkpoint, decoded: they are written to the store once per
	// checkpoint (Flush), not encoded and decoded again for every record,
	// as Kafka Streams' record cache does. At most maxCached keys; gen is
	// the store's generation they are of. nil when the state has a TTL.
	cache *keyTable[aggEntry]
	gen   uint64
	// saved and savedInts are scratch space to undo a record's partial
	// fold, and vals to encode a stored accumulator.
	saved, vals []any
	savedInts   []int
	// raw is, after foldCached, each field's accumulator as the record
	// folded in wrote it, where it was that (aggField.foldInt), or nil:
	// the emitted value copies it rather than format the int again.
	raw [4][]byte
	// chunk holds output values, many to an allocation (encodeResult).
	chunk codec.Chunk
}

// maxCached bounds the keys an aggregate caches between two checkpoints;
// past it, the cache is written to the store and emptied.
const maxCached = 100_000

type lastRecord struct{ r *pipeline.Record }

// savedField is a field's accumulator in a map (has: there is one), kept
// to undo a record's partial fold.
type savedField struct {
	v   any
	has bool
}

// aggEntry is a key's cached accumulator: a value per field, by index, so
// that folding a record looks up its key once and no field by name (a map
// per key cost a keyed count several lookups per record, as much as the
// rest of its fold).
type aggEntry struct {
	key string
	// vals holds the fields' accumulators, absent for a field with none
	// yet; nil once rolled back, when the store's is the current one.
	vals []any
	// ints holds, by field index, the accumulators that are ints, where
	// vals holds inInts: counted, summed and kept without boxing each
	// new value (three boxes a record were a keyed count's largest
	// allocation once its records' memory was reused).
	ints []int
	// last is, with emit: checkpoint, a copy of the key's last record
	// since the last checkpoint (CopyWithoutValue); nil if none.
	last *pipeline.Record
}

// smallEntry is an aggEntry of up to four fields and a key of up to 24
// bytes, with its accumulators and key inside: one allocation a key, and
// a lookup that finds the key, reads and writes its accumulators in
// neighbouring memory. With 10,000 keys the cache outgrows a core's cache
// memory, and the four places a key's entry used to take were four misses
// a record.
type smallEntry struct {
	aggEntry
	vals [4]any
	ints [4]int
	key  [24]byte
}

// newAggEntry returns the entry of key for n fields, with no accumulators
// (vals empty, to append to) and its ints zero.
func newAggEntry(key []byte, n int) *aggEntry {
	if n > 4 || len(key) > 24 || len(key) == 0 {
		return &aggEntry{key: string(key), vals: make([]any, 0, n), ints: make([]int, n)}
	}
	s := new(smallEntry)
	copy(s.key[:], key)
	// The string points into s, which it keeps alive; the bytes never
	// change.
	s.aggEntry = aggEntry{key: unsafe.String(&s.key[0], len(key)), vals: s.vals[:0:n], ints: s.ints[:n:n]}
	return &s.aggEntry
}

// val returns field i's accumulator, boxed.
func (e *aggEntry) val(i int) any {
	if isInts(e.vals[i]) {
		return e.ints[i]
	}
	return e.vals[i]
}

// absent stands in aggEntry.vals for a field with no accumulator: an
// accumulator can be nil ({last: value.x} of a null x).
var absent any = absentField{}

type absentField struct{}

// isAbsent reports whether v is absent. It and isInts test the type alone:
// comparing with the interface calls the runtime.
func isAbsent(v any) bool { _, ok := v.(absentField); return ok }

// inInts stands in aggEntry.vals for an accumulator kept in ints.
var inInts any = intsField{}

type intsField struct{}

// isInts reports whether v is inInts.
func isInts(v any) bool { _, ok := v.(intsField); return ok }

func (o *aggregateOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("aggregate needs a record key; this record has none")
	}
	var out []byte
	if o.cache != nil {
		e, err := o.foldCached(ctx, key, r)
		if err != nil {
			return err
		}
		if o.def.emit == "checkpoint" {
			if e.last == nil {
				o.changed = append(o.changed, e)
				e.last = new(pipeline.Record)
			}
			r.CopyWithoutValue(e.last)
			return nil
		}
		out, err = o.encodeVals(e.vals, e.ints, &o.raw)
	} else {
		acc, err := o.foldStored(ctx, key, r)
		if err != nil {
			return err
		}
		if o.def.emit == "checkpoint" {
			last := o.dirty[string(key)]
			if last == nil {
				last = &lastRecord{new(pipeline.Record)}
				o.dirty[string(key)] = last
			}
			r.CopyWithoutValue(last.r)
			return nil
		}
		out, err = o.encodeResult(acc)
	}
	if err != nil {
		return err
	}
	r.Value = pipeline.RawValue(out, pipeline.JSON)
	ctx.Emit(r)
	return nil
}

// foldStored adds r to key's accumulator in the store, and returns it.
func (o *aggregateOp) foldStored(ctx pipeline.Context, key []byte, r *pipeline.Record) (map[string]any, error) {
	acc, _, err := o.acc.Get(key)
	if err != nil {
		return nil, err
	}
	if acc == nil {
		acc = map[string]any{}
	}
	for _, f := range o.def.fields {
		if err := f.fold(ctx.Eval(), acc, r); err != nil {
			return nil, fmt.Errorf("field %s: %w", f.name, err)
		}
	}
	return acc, o.acc.Put(key, acc)
}

// foldCached adds r to key's accumulator in the cache, and returns its
// entry. A field that fails leaves the accumulator as it was before r.
func (o *aggregateOp) foldCached(ctx pipeline.Context, key []byte, r *pipeline.Record) (*aggEntry, error) {
	if g := o.st.Generation(); g != o.gen {
		o.rollBack(g)
	}
	e, h := o.cache.get(key)
	cached := e != nil
	if !cached {
		if o.cache.len() >= maxCached {
			if err := o.writeBack(); err != nil {
				return nil, err
			}
		}
		acc, _, err := o.acc.Get(key)
		if err != nil {
			return nil, err
		}
		e = newAggEntry(key, len(o.def.fields))
		e.vals = o.valsOf(acc, e.vals)
	}
	// Most folds keep every accumulator an int: they are worked out
	// first, and set once all are, with nothing to undo. j counts the
	// fields worked out so.
	var ints [4]int
	j, failed := 0, -1 // failed: the field known not to fold as an int
	if len(o.def.fields) <= len(ints) {
		ev := ctx.Eval()
		for ; j < len(o.def.fields); j++ {
			n, raw, ok := o.def.fields[j].foldInt(ev, e, j, r)
			if !ok {
				break
			}
			ints[j], o.raw[j] = n, raw
		}
		failed = j
		if j == len(o.def.fields) {
			for i := range j {
				e.ints[i] = ints[i]
				if !isInts(e.vals[i]) {
					e.vals[i] = inInts
				}
			}
			if !cached {
				o.cache.put(h, e.key, e)
			}
			return e, nil
		}
	}
	o.raw = [4][]byte{}
	o.saved = append(o.saved[:0], e.vals...)
	o.savedInts = append(o.savedInts[:0], e.ints...)
	for i := range j {
		e.ints[i], e.vals[i] = ints[i], inInts
	}
	for i := j; i < len(o.def.fields); i++ {
		f := &o.def.fields[i]
		if i != failed {
			if n, _, ok := f.foldInt(ctx.Eval(), e, i, r); ok {
				e.ints[i], e.vals[i] = n, inInts
				continue
			}
		}
		x, err := f.foldValue(ctx.Eval(), e.val(i), r)
		if err != nil {
			copy(e.vals, o.saved)
			copy(e.ints, o.savedInts)
			return nil, fmt.Errorf("field %s: %w", f.name, err)
		}
		e.vals[i] = x
	}
	if !cached {
		o.cache.put(h, e.key, e)
	}
	return e, nil
}

// rollBack forgets the cache: the store was aborted or restored (it is of
// generation g now), and what the cache holds with it.
func (o *aggregateOp) rollBack(g uint64) {
	_ = o.cache.each(func(e *aggEntry) error {
		e.vals = nil
		return nil
	})
	o.cache.reset()
	o.gen = g
}

// valsOf appends the fields' accumulators in acc to vals, by field index.
func (o *aggregateOp) valsOf(acc map[string]any, vals []any) []any {
	for _, f := range o.def.fields {
		v, ok := acc[f.name]
		if !ok {
			v = absent
		}
		vals = append(vals, v)
	}
	return vals
}

// writeBack writes the cached accumulators to the store and empties the
// cache.
func (o *aggregateOp) writeBack() error {
	err := o.cache.each(func(e *aggEntry) error {
		acc := make(map[string]any, len(e.vals))
		for i, f := range o.def.fields {
			if !isAbsent(e.vals[i]) {
				acc[f.name] = e.val(i)
			}
		}
		return o.acc.Put([]byte(e.key), acc)
	})
	if err != nil {
		return err
	}
	o.cache.reset()
	o.gen = o.st.Generation()
	return nil
}

// Flush writes the cached accumulators to the store and emits, with emit:
// checkpoint, the current values of the keys that changed since the last
// checkpoint, in key order.
func (o *aggregateOp) Flush(ctx pipeline.Context) error {
	if g := o.st.Generation(); o.cache != nil && g != o.gen {
		o.rollBack(g)
	}
	if len(o.changed) > 0 {
		// A key rolled back and changed again has two entries: the
		// later one is current.
		slices.SortStableFunc(o.changed, func(a, b *aggEntry) int { return cmp.Compare(a.key, b.key) })
		for i, e := range o.changed {
			r := e.last
			e.last = nil
			if i+1 < len(o.changed) && o.changed[i+1].key == e.key {
				continue
			}
			var out []byte
			var err error
			if e.vals != nil {
				out, err = o.encodeVals(e.vals, e.ints, nil)
			} else {
				// Rolled back: the store's is the current one.
				acc, ok, gerr := o.acc.Get([]byte(e.key))
				if gerr != nil {
					return gerr
				}
				if !ok {
					continue
				}
				out, err = o.encodeResult(acc)
			}
			if err != nil {
				return err
			}
			r.Value = pipeline.RawValue(out, pipeline.JSON)
			ctx.Emit(r)
		}
		clear(o.changed)
		o.changed = o.changed[:0]
	}
	if len(o.dirty) > 0 {
		keys := make([]string, 0, len(o.dirty))
		for k := range o.dirty {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			acc, ok, err := o.acc.Get([]byte(k))
			if err != nil {
				return err
			}
			if !ok {
				continue // expired since
			}
			out, err := o.encodeResult(acc)
			if err != nil {
				return err
			}
			r := o.dirty[k].r
			r.Value = pipeline.RawValue(out, pipeline.JSON)
			ctx.Emit(r)
		}
		clear(o.dirty)
	}
	if o.cache != nil {
		return o.writeBack()
	}
	return nil
}

// encodeResult writes the output value of acc as a JSON object, its
// fields in name order, as the sink would have written the object: most
// outputs go straight to a sink, and building the object only to encode it
// was a tenth of a keyed count's work. A step after this one that reads
// the value decodes it, as it would a record read from a topic.
func (o *aggregateOp) encodeResult(acc map[string]any) ([]byte, error) {
	o.vals = o.valsOf(acc, o.vals[:0])
	return o.encodeVals(o.vals, nil, nil)
}

// encodeVals is encodeResult of the accumulators by field index: vals,
// and ints where vals holds inInts, written as raw has them where it has
// (foldCached).
func (o *aggregateOp) encodeVals(vals []any, ints []int, raw *[4][]byte) ([]byte, error) {
	b := o.chunk.Tail()
	b = append(b, '{')
	var err error
	for i := range o.def.fields {
		f := &o.def.fields[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, f.jsonName...)
		if isInts(vals[i]) {
			if raw != nil && i < len(raw) && raw[i] != nil {
				b = append(b, raw[i]...)
				continue
			}
			b = strconv.AppendInt(b, int64(ints[i]), 10)
			continue
		}
		if b, err = codec.AppendJSON(b, f.result(vals[i])); err != nil {
			return nil, fmt.Errorf("field %s: %w", f.name, err)
		}
	}
	return o.chunk.Keep(append(b, '}')), nil
}

// result is the field's output value from its accumulator v (absent:
// null): avg's mean, the others' accumulator.
func (f *aggField) result(v any) any {
	if isAbsent(v) {
		return nil
	}
	if f.kind == aggAvg {
		pair, _ := v.([]any)
		if len(pair) == 2 {
			sum, _ := toFloat(pair[0])
			n, _ := toFloat(pair[1])
			if n > 0 {
				v = sum / n
			}
		}
	}
	return v
}

// fold adds r to the field's accumulator in acc.
func (f *aggField) fold(ev *pipeline.Evaluator, acc map[string]any, r *pipeline.Record) error {
	cur, ok := acc[f.name]
	if !ok {
		cur = absent
	}
	x, err := f.foldValue(ev, cur, r)
	if err != nil {
		return err
	}
	acc[f.name] = x
	return nil
}

// foldInt returns field i of e with r folded in where the accumulator
// stays an int: a count; the sum, first or last of whole numbers that
// Evaluator.EvalInt reads without boxing. It changes nothing; ok is false
// where foldValue must fold r. raw, when not nil, is n as r's value wrote
// it (Evaluator.EvalIntRaw), valid while r is: the output can copy it
// rather than format n.
func (f *aggField) foldInt(ev *pipeline.Evaluator, e *aggEntry, i int, r *pipeline.Record) (n int, raw []byte, ok bool) {
	cur := e.vals[i]
	// n is the accumulator, if it is an int.
	none := false // no accumulator yet
	switch cur.(type) {
	case intsField:
		n = e.ints[i]
	case absentField:
		none = true
	default:
		var isInt bool
		if n, isInt = cur.(int); !isInt && f.kind != aggCount && f.kind != aggLast {
			return 0, nil, false
		}
	}
	switch f.kind {
	case aggCount:
		if f.expr != nil {
			return 0, nil, false // a count of something else: foldValue checks it
		}
		n++
	case aggSum, aggFirst, aggLast:
		x, xraw, isInt := ev.EvalIntRaw(f.expr, r)
		if !isInt {
			return 0, nil, false
		}
		switch {
		case f.kind == aggLast, none:
			n, raw = x, xraw
		case f.kind == aggSum:
			n += x
		}
	default:
		return 0, nil, false
	}
	return n, raw, true
}

// foldValue returns the field's accumulator cur (absent if none) with r
// added.
func (f *aggField) foldValue(ev *pipeline.Evaluator, cur any, r *pipeline.Record) (any, error) {
	has := !isAbsent(cur)
	var x any
	if f.expr != nil {
		var err error
		if f.kind == aggReduce {
			if !has {
				if cur, err = ev.Eval(f.init, r); err != nil {
					return nil, err
				}
			}
			return ev.EvalState(f.expr, r, cur)
		}
		if x, err = ev.Eval(f.expr, r); err != nil {
			return nil, err
		}
		if (f.kind == aggFirst || f.kind == aggLast || f.kind == aggCollect) && readsBytes(r) {
			x = detach(x)
		}
	}
	switch f.kind {
	case aggCount:
		n, _ := cur.(int)
		return n + 1, nil
	case aggSum:
		if !has {
			cur = nil
		}
		return addNumbers(cur, x, has)
	case aggMin, aggMax:
		if _, ok := toFloat(x); !ok {
			return nil, fmt.Errorf("%s of %T: want a number", f.kind, x)
		}
		if !has {
			return x, nil
		}
		a, _ := toFloat(cur)
		b, _ := toFloat(x)
		if (f.kind == aggMin && b < a) || (f.kind == aggMax && b > a) {
			return x, nil
		}
		return cur, nil
	case aggAvg:
		if _, ok := toFloat(x); !ok {
			return nil, fmt.Errorf("avg of %T: want a number", x)
		}
		pair, _ := cur.([]any)
		if len(pair) != 2 {
			pair = []any{0, 0}
		}
		s, err := addNumbers(pair[0], x, true)
		if err != nil {
			return nil, err
		}
		n, _ := pair[1].(int)
		return []any{s, n + 1}, nil
	case aggFirst:
		if !has {
			return x, nil
		}
		return cur, nil
	case aggLast:
		return x, nil
	case aggCollect:
		list, _ := cur.([]any)
		list = append(list, x)
		if len(list) > f.max {
			list = list[len(list)-f.max:]
		}
		return list, nil
	}
	return cur, nil
}

// readsBytes reports whether r's key or value was read in the bytes
// format: only then can what Eval returns of r hold r's bytes as read
// (other formats decode to strings, which are copies).
func readsBytes(r *pipeline.Record) bool {
	return r.Key.Format() == pipeline.Bytes || r.Value.Format() == pipeline.Bytes
}

// detach returns x with every []byte in it copied: the bytes of a key or
// value read in the bytes format are the record's as read, which the
// engine may reuse once the record is done (pipeline.InputForgetter). Maps
// and lists are changed in place: Eval's are new or the record's own.
func detach(x any) any {
	switch x := x.(type) {
	case []byte:
		return bytes.Clone(x)
	case map[string]any:
		for k, v := range x {
			switch v.(type) {
			case []byte, map[string]any, []any:
				x[k] = detach(v)
			}
		}
	case []any:
		for i, v := range x {
			switch v.(type) {
			case []byte, map[string]any, []any:
				x[i] = detach(v)
			}
		}
	}
	return x
}

// addNumbers adds b to a (a absent when !has), keeping whole numbers whole.
func addNumbers(a, b any, has bool) (any, error) {
	bi, bInt := b.(int)
	if _, ok := toFloat(b); !ok {
		return nil, fmt.Errorf("sum of %T: want a number", b)
	}
	if !has || a == nil {
		return b, nil
	}
	if ai, ok := a.(int); ok && bInt {
		return ai + bi, nil
	}
	af, _ := toFloat(a)
	bf, _ := toFloat(b)
	return af + bf, nil
}

func toFloat(x any) (float64, bool) {
	switch t := x.(type) {
	case int:
		return float64(t), true
	case int64:
		return float64(t), true
	case float64:
		return t, true
	}
	return 0, false
}
