package ops

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// window aggregates, per record key, the records of each event-time
// window, as Flink's keyed windows do:
//
//	window:
//	  tumbling: 1m                       # or sliding: {size: 10m, slide: 1m}
//	                                     # or session: {gap: 30m}
//	  allowed_lateness: 30s              # keep a closed window this long for late records
//	  fields: {n: count, mean: {avg: value.temp}}
//	  emit: close                        # or {early: 10s}: updates before the close too
//	  late: output                       # records past the lateness go to <step>.late
//	  time: event                        # or processing: windows of the wall clock
//
// A window [start, end) closes when the watermark reaches end: its result
// is emitted then, once. Until the watermark reaches end+allowed_lateness
// a late record still updates it, and each such update emits the
// corrected result; after that its state is gone and later records are
// late data: sent to the step's late output, or counted and dropped.
//
// Every result is a record keyed like the input, stamped end-1ms, whose
// value holds the key, the window's bounds in Unix milliseconds, how the
// result came (timing: early, on_time or late) and the fields:
//
//	{"key": "s1", "window_start": 1700000040000, "window_end": 1700000100000,
//	 "timing": "on_time", "n": 12, "mean": 21.5}
//
// Window contents and timers are keyed state (state.Map and state.Timers):
// they ride the checkpoint's transaction like an aggregate's, so results are
// exactly-once, and the state holds only the windows still open.
type window struct {
	kind     string // tumbling, sliding or session
	size     int64  // milliseconds: tumbling and sliding size, session gap
	slide    int64  // sliding
	lateness int64
	early    time.Duration // 0: emit at close only
	lateOut  lateData
	procTime bool // windows of the processing time, not the event time
	fields   []aggField
	fp       string
}

type windowSpec struct {
	Tumbling        time.Duration  `yaml:"tumbling"`
	Sliding         *slidingSpec   `yaml:"sliding"`
	Session         *sessionSpec   `yaml:"session"`
	AllowedLateness time.Duration  `yaml:"allowed_lateness"`
	Fields          map[string]any `yaml:"fields"`
	Emit            any            `yaml:"emit"`
	Late            string         `yaml:"late"`
	Time            string         `yaml:"time"`
}

type slidingSpec struct {
	Size  time.Duration `yaml:"size"`
	Slide time.Duration `yaml:"slide"`
}

type sessionSpec struct {
	Gap time.Duration `yaml:"gap"`
}

// Names the value of a window result uses; fields may not take them.
var windowNames = []string{"key", "window_start", "window_end", "timing"}

func newWindow(s *pipeline.Spec) (pipeline.Definition, error) {
	var ws windowSpec
	if !s.Decode(&ws) {
		return nil, nil
	}
	w := &window{lateness: ws.AllowedLateness.Milliseconds()}
	kinds := 0
	if ws.Tumbling != 0 {
		kinds++
		w.kind, w.size = "tumbling", ws.Tumbling.Milliseconds()
		if w.size < 1 {
			s.Errorf(".tumbling", "the window size must be at least 1ms, found %s", ws.Tumbling)
		}
	}
	if ws.Sliding != nil {
		kinds++
		w.kind, w.size, w.slide = "sliding", ws.Sliding.Size.Milliseconds(), ws.Sliding.Slide.Milliseconds()
		switch {
		case w.size < 1:
			s.Errorf(".sliding.size", "required: the window size, at least 1ms, such as 10m")
		case w.slide < 1:
			s.Errorf(".sliding.slide", "required: how far each window starts after the one before, at least 1ms, such as 1m")
		case w.slide > w.size:
			s.Errorf(".sliding.slide", "the slide (%s) is larger than the size (%s): records between windows would belong to none; use a slide up to the size (equal to it is a tumbling window)", ws.Sliding.Slide, ws.Sliding.Size)
		}
	}
	if ws.Session != nil {
		kinds++
		w.kind, w.size = "session", ws.Session.Gap.Milliseconds()
		if w.size < 1 {
			s.Errorf(".session.gap", "the session gap must be at least 1ms (a gap of 0 would make every record its own session), found %s", ws.Session.Gap)
		}
	}
	if kinds != 1 {
		s.Errorf("", "give exactly one window kind: tumbling: 1m, sliding: {size: 10m, slide: 1m} or session: {gap: 30m}")
	}
	switch e := ws.Emit.(type) {
	case nil:
	case string:
		if e != "close" {
			s.Errorf(".emit", "expected close or {early: 10s}, found %q", e)
		}
	case map[string]any:
		d, err := durationOf(e["early"])
		switch {
		case len(e) != 1 || e["early"] == nil:
			s.Errorf(".emit", "expected close or {early: 10s}")
		case err != nil:
			s.Errorf(".emit.early", "%v", err)
		case d <= 0:
			s.Errorf(".emit.early", "must be more than 0: how often an open window's changes are emitted")
		default:
			w.early = d
		}
	default:
		s.Errorf(".emit", "expected close or {early: 10s}, found %s", pipeline.Describe(e))
	}
	switch ws.Time {
	case "", "event":
	case "processing":
		w.procTime = true
		if ws.AllowedLateness != 0 {
			s.Errorf(".allowed_lateness", "allowed_lateness needs event time (time: event): a window of processing time gets no late records")
		}
	default:
		s.Errorf(".time", "must be event (the default: the records' event time, see the source's event_time) or processing (the wall clock), found %q", ws.Time)
	}
	w.lateOut = parseLate(s, ws.Late)
	if len(ws.Fields) == 0 {
		s.Errorf(".fields", "required: at least one aggregation, e.g. {n: count}")
		return nil, nil
	}
	w.fields = parseFields(s, ".fields", ws.Fields)
	for _, f := range w.fields {
		if slices.Contains(windowNames, f.name) {
			s.Errorf(".fields."+f.name, "%q is a name of the result itself (%v); choose another", f.name, windowNames)
		}
		if w.kind == "session" && f.kind == aggReduce {
			s.Errorf(".fields."+f.name, "reduce cannot be used in session windows: sessions merge, and a reduce's states cannot be combined")
		}
	}
	w.fp = fmt.Sprintf("window:v1:%s:%d:%d:%v|%s", w.kind, w.size, w.slide, w.procTime, fieldsHash(w.fields))
	return w, nil
}

// durationOf reads a duration from a spec value.
func durationOf(x any) (time.Duration, error) {
	switch t := x.(type) {
	case string:
		return time.ParseDuration(t)
	case int:
		if t == 0 {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("expected a duration such as 10s, found %s", pipeline.Describe(x))
}

func (w *window) Outputs() []string { return w.lateOut.outputs() }

func (w *window) Fingerprint() string { return w.fp }
func (w *window) UsesEventTime() bool { return !w.procTime }

// KeepsNoRecords: the operator folds a record into its windows, whose
// accumulators hold decoded values and whose keys are copies, and sends a
// late one on before Process returns; a result is a record of its own
// (pipeline.Forgetter).
func (w *window) KeepsNoRecords() bool { return true }

// KeepsNoInput: its keys are copies, its accumulators decoded values
// (first, last and collect copy []byte, as aggregate's do), its results
// built of them; but a reduce's state can be anything its expression
// builds (pipeline.InputForgetter).
func (w *window) KeepsNoInput() bool { return !hasReduce(w.fields) }

// MergesInputs: a window's result stands for all its records.
func (w *window) MergesInputs() (sub, what, instead string) {
	return ".fields", "a window writes one record for many inputs", "use aggregate with emit: update"
}

func (w *window) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, fmt.Errorf("window needs a state store")
}

func (w *window) NewStatefulOperator(_ pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	wins, err := state.NewMap[map[string]any](st, "windows", state.TTLConfig{}, state.WithCodec[map[string]any](codec.Acc{}))
	if err != nil {
		return nil, err
	}
	tm, err := state.NewTimers(st, "timers")
	if err != nil {
		return nil, err
	}
	op := &windowOp{def: w, st: st, wins: wins, timers: tm}
	if w.kind != "session" {
		op.cache = newKeyTable[windowKey]()
	}
	return op, nil
}

// windowOp is a window step in one task. Its state, per key: the open
// windows (map key: the start, order-preserving), each {"e": end, "a":
// accumulator, "f": fired at close, "d": changed since the last early
// result}; and timers at each window's end (and end+lateness), and for
// early results at the next one's time.
type windowOp struct {
	def    *window
	st     *state.Store
	wins   *state.Map[map[string]any]
	timers *state.Timers
	starts []int64 // scratch
	// cache holds, for tumbling and sliding windows, the windows used
	// since the last checkpoint, decoded, by key: written to the store
	// once per checkpoint (Flush), not decoded and encoded again for
	// every record. At most maxCached windows (cached counts them); gen
	// is the store's generation they are of.
	cache  *keyTable[windowKey]
	cached int
	gen    uint64
	// saved is scratch space to undo a record's partial fold.
	saved []savedField
	// firing is scratch space for a key's cached windows, in start
	// order, while a timer goes through them.
	firing []*cachedWindow
}

// windowKey is a key's windows in windowOp.cache: a few (one tumbling
// window, or as many sliding ones as overlap), so a record finds its own
// by going through them.
type windowKey struct {
	wins []*cachedWindow
}

// find returns the window at start, nil if there is none.
func (k *windowKey) find(start int64) *cachedWindow {
	for _, c := range k.wins {
		if c.start == start {
			return c
		}
	}
	return nil
}

// drop removes c.
func (k *windowKey) drop(c *cachedWindow) {
	for i, x := range k.wins {
		if x == c {
			k.wins = slices.Delete(k.wins, i, i+1)
			return
		}
	}
}

// cachedWindow is a window in windowOp.cache, its stored map's entries
// as fields: a record's fold reads and sets them without a lookup each.
// closeSet says its close timer is set, so that later records need not
// set it again.
type cachedWindow struct {
	start int64          // its map key in the store (startKey)
	end   int64          // "e"
	acc   map[string]any // "a", never nil
	fired bool           // "f": its result was emitted at its close
	// early ("d") says it changed since its last early result.
	early    bool
	closeSet bool
	// inStore says the store holds a copy of it (it was read from
	// there): dropping it must remove that copy too.
	inStore bool
}

// cachedOf returns the cachedWindow of win, a window as stored.
func cachedOf(win map[string]any) *cachedWindow {
	c := &cachedWindow{end: asInt64(win["e"])}
	c.acc, _ = win["a"].(map[string]any)
	if c.acc == nil {
		c.acc = map[string]any{}
	}
	c.fired, _ = win["f"].(bool)
	c.early, _ = win["d"].(bool)
	return c
}

// stored returns c as the store holds a window.
func (c *cachedWindow) stored() map[string]any {
	win := make(map[string]any, 4)
	win["e"], win["a"] = c.end, c.acc
	if c.fired {
		win["f"] = true
	}
	if c.early {
		win["d"] = true
	}
	return win
}

// closing returns the time windows close at: the watermark, or for
// windows of processing time the clock.
func (o *windowOp) closing(ctx pipeline.Context) int64 {
	if o.def.procTime {
		return ctx.Now().UnixMilli()
	}
	return watermarkOf(ctx)
}

// domain is the time domain of the windows' ends.
func (o *windowOp) domain() state.TimeDomain {
	if o.def.procTime {
		return state.ProcessingTime
	}
	return state.EventTime
}

func watermarkOf(ctx pipeline.Context) int64 {
	wm := ctx.Watermark()
	if wm.IsZero() {
		return math.MinInt64
	}
	return wm.UnixMilli()
}

// startKey is a window's map key: its start, big-endian with the sign bit
// flipped, so that map keys sort by start.
func startKey(start int64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(start)^(1<<63))
	return string(b[:])
}

func startOf(mk string) int64 {
	return int64(binary.BigEndian.Uint64([]byte(mk)) ^ (1 << 63))
}

// assign returns the starts of the tumbling or sliding windows holding ts.
func (w *window) assign(ts int64, out []int64) []int64 {
	out = out[:0]
	if w.kind == "tumbling" {
		return append(out, ts-mod(ts, w.size))
	}
	for start := ts - mod(ts, w.slide); start > ts-w.size; start -= w.slide {
		out = append(out, start)
	}
	return out
}

// mod is a modulo that is never negative, for times before 1970.
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func (o *windowOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	key, err := r.KeyBytes()
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("window needs a record key; this record has none (key the stream with key_by)")
	}
	ts, wm := r.Timestamp.UnixMilli(), watermarkOf(ctx)
	if o.def.procTime {
		// The record belongs to the windows of now, none of which has
		// closed yet.
		ts, wm = ctx.Now().UnixMilli(), math.MinInt64
	}
	if o.def.kind == "session" {
		return o.session(ctx, key, ts, wm, r)
	}
	took := false
	o.starts = o.def.assign(ts, o.starts)
	for _, start := range o.starts {
		end := start + o.def.size
		if end+o.def.lateness <= wm {
			continue // this window is gone
		}
		took = true
		c, err := o.cachedWindow(key, start, end)
		if err != nil {
			return err
		}
		if err := o.add(ctx, key, start, c, r, wm); err != nil {
			return err
		}
	}
	if !took {
		o.late(ctx, r)
	}
	return nil
}

// cachedWindow returns key's window at start, ending at end, from the
// cache, else from the store or new, and caches it.
func (o *windowOp) cachedWindow(key []byte, start, end int64) (*cachedWindow, error) {
	if g := o.st.Generation(); g != o.gen {
		// Aborted or restored: what the cache holds was rolled back.
		o.cache.reset()
		o.cached, o.gen = 0, g
	}
	wk, h := o.cache.get(key)
	if wk != nil {
		if c := wk.find(start); c != nil {
			return c, nil
		}
	}
	if o.cached >= maxCached {
		if err := o.writeBack(); err != nil {
			return nil, err
		}
		wk = nil
	}
	win, ok, err := o.wins.Get(key, startKey(start))
	if err != nil {
		return nil, err
	}
	var c *cachedWindow
	if ok {
		c = cachedOf(win)
		c.inStore = true
	} else {
		c = &cachedWindow{end: end, acc: map[string]any{}}
	}
	c.start = start
	if wk == nil {
		wk = &windowKey{}
		o.cache.put(h, string(key), wk)
	}
	wk.wins = append(wk.wins, c)
	o.cached++
	return c, nil
}

// writeBack writes the cached windows to the store and empties the cache.
func (o *windowOp) writeBack() error {
	var key []byte
	err := o.cache.eachKey(func(k string, wk *windowKey) error {
		key = append(key[:0], k...)
		for _, c := range wk.wins {
			if err := o.wins.Put(key, startKey(c.start), c.stored()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	o.cache.reset()
	o.cached, o.gen = 0, o.st.Generation()
	return nil
}

// Flush writes the cached windows to the store, before the checkpoint
// logs its changes.
func (o *windowOp) Flush(pipeline.Context) error {
	if o.cache == nil {
		return nil
	}
	if o.st.Generation() != o.gen {
		o.cache.reset() // rolled back since
		o.cached, o.gen = 0, o.st.Generation()
		return nil
	}
	return o.writeBack()
}

// add folds r into window c of key and sets the timers it needs: its
// close, or, if it closed already, emits the corrected result. A field
// that fails leaves the window as it was before r.
func (o *windowOp) add(ctx pipeline.Context, key []byte, start int64, c *cachedWindow, r *pipeline.Record, wm int64) error {
	acc := c.acc
	saved := o.saved[:0]
	for _, f := range o.def.fields {
		v, has := acc[f.name]
		saved = append(saved, savedField{v, has})
	}
	o.saved = saved
	for i, f := range o.def.fields {
		if err := f.fold(ctx.Eval(), acc, r); err != nil {
			for j, g := range o.def.fields[:i+1] {
				if saved[j].has {
					acc[g.name] = saved[j].v
				} else {
					delete(acc, g.name)
				}
			}
			return fmt.Errorf("field %s: %w", f.name, err)
		}
	}
	end := c.end
	if c.fired {
		// Closed, within the lateness: the corrected result, now.
		return o.emit(ctx, key, start, end, acc, "late")
	}
	if end <= wm {
		// A window the watermark passed before its first record came,
		// within the lateness: its result now, and its end later.
		c.fired, c.early = true, false
		if err := o.emit(ctx, key, start, end, acc, "late"); err != nil {
			return err
		}
		return o.timers.Set(key, time.UnixMilli(end+o.def.lateness), state.EventTime)
	}
	if !c.closeSet {
		if err := o.timers.Set(key, time.UnixMilli(end), o.domain()); err != nil {
			return err
		}
		c.closeSet = o.cache != nil
	}
	if o.def.early > 0 {
		if !c.early {
			c.early = true
			return o.timers.Set(key, ctx.Now().Add(o.def.early), state.ProcessingTime)
		}
	}
	return nil
}

// session adds r, at ts, to key's sessions: it opens [ts, ts+gap), which
// merges with every session it overlaps or touches.
func (o *windowOp) session(ctx pipeline.Context, key []byte, ts, wm int64, r *pipeline.Record) error {
	all, err := o.wins.Entries(key)
	if err != nil {
		return err
	}
	start, end := ts, ts+o.def.size
	var merged []state.MapEntry[map[string]any]
	for _, e := range all {
		s, en := startOf(e.Key), asInt64(e.Value["e"])
		if s <= end && en >= start { // overlaps or touches
			merged = append(merged, e)
			start, end = min(start, s), max(end, en)
		}
	}
	if end+o.def.lateness <= wm {
		o.late(ctx, r)
		return nil
	}
	c := &cachedWindow{end: end, acc: map[string]any{}}
	if len(merged) > 0 {
		// In start order (Entries sorts by map key): first and last come
		// from the earliest and the latest session.
		acc, _ := merged[0].Value["a"].(map[string]any)
		fired, dirty := false, false
		for i, e := range merged {
			if i > 0 {
				b, _ := e.Value["a"].(map[string]any)
				acc = o.merge(acc, b)
			}
			f, _ := e.Value["f"].(bool)
			d, _ := e.Value["d"].(bool)
			fired, dirty = fired || f, dirty || d
			if startOf(e.Key) != start {
				if err := o.wins.Remove(key, e.Key); err != nil {
					return err
				}
			}
		}
		if acc != nil {
			c.acc = acc
		}
		c.early = dirty
		// A merged session that had closed is open again if its new end
		// is still ahead of the watermark.
		c.fired = fired && end <= wm
	}
	if err := o.add(ctx, key, start, c, r, wm); err != nil {
		return err
	}
	return o.wins.Put(key, startKey(start), c.stored())
}

// merge combines the accumulators of two sessions, a the earlier.
func (o *windowOp) merge(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(o.def.fields))
	for _, f := range o.def.fields {
		x, hasX := a[f.name]
		y, hasY := b[f.name]
		switch {
		case !hasX:
			out[f.name] = y
			continue
		case !hasY:
			out[f.name] = x
			continue
		}
		switch f.kind {
		case aggCount:
			out[f.name] = asInt(x) + asInt(y)
		case aggSum:
			out[f.name], _ = addNumbers(x, y, true)
		case aggMin, aggMax:
			fx, _ := toFloat(x)
			fy, _ := toFloat(y)
			out[f.name] = x
			if (f.kind == aggMin && fy < fx) || (f.kind == aggMax && fy > fx) {
				out[f.name] = y
			}
		case aggAvg:
			px, _ := x.([]any)
			py, _ := y.([]any)
			if len(px) == 2 && len(py) == 2 {
				s, _ := addNumbers(px[0], py[0], true)
				out[f.name] = []any{s, asInt(px[1]) + asInt(py[1])}
			}
		case aggFirst:
			out[f.name] = x
		case aggLast:
			out[f.name] = y
		case aggCollect:
			lx, _ := x.([]any)
			ly, _ := y.([]any)
			l := append(slices.Clone(lx), ly...)
			if len(l) > f.max {
				l = l[len(l)-f.max:]
			}
			out[f.name] = l
		}
	}
	return out
}

// late handles a record whose every window is gone.
func (o *windowOp) late(ctx pipeline.Context, r *pipeline.Record) { o.def.lateOut.send(ctx, r) }

// OnTimer closes key's windows the watermark passed, drops those past
// their lateness, and emits early results of open windows that changed.
// It goes through the key's windows in start order: those in the cache
// there, the others in the store.
func (o *windowOp) OnTimer(ctx pipeline.Context, t state.Timer) error {
	var wk *windowKey
	if o.cache != nil && o.st.Generation() == o.gen {
		wk, _ = o.cache.get(t.Key)
	}
	var skip func(string) bool
	cached := o.firing[:0]
	if wk != nil && len(wk.wins) > 0 {
		// A cached window is newer than its stored copy.
		skip = func(mk string) bool { return wk.find(startOf(mk)) != nil }
		cached = append(cached, wk.wins...)
		slices.SortFunc(cached, func(a, b *cachedWindow) int { return cmp.Compare(a.start, b.start) })
	}
	o.firing = cached
	stored, err := o.wins.EntriesExcept(t.Key, skip)
	if err != nil {
		return err
	}
	wm := o.closing(ctx)
	for i, j := 0, 0; i < len(stored) || j < len(cached); {
		if j == len(cached) || (i < len(stored) && startOf(stored[i].Key) < cached[j].start) {
			if err := o.fireStored(ctx, t, stored[i], wm); err != nil {
				return err
			}
			i++
			continue
		}
		if err := o.fireCached(ctx, t, wk, cached[j], wm); err != nil {
			return err
		}
		j++
	}
	clear(cached)
	return nil
}

// fireStored is OnTimer for a window of the store.
func (o *windowOp) fireStored(ctx pipeline.Context, t state.Timer, e state.MapEntry[map[string]any], wm int64) error {
	c := cachedOf(e.Value)
	c.start = startOf(e.Key)
	changed, drop, err := o.fire(ctx, t, c, wm)
	switch {
	case err != nil:
		return err
	case drop:
		return o.wins.Remove(t.Key, e.Key)
	case changed:
		return o.wins.Put(t.Key, e.Key, c.stored())
	}
	return nil
}

// fireCached is OnTimer for c, a cached window of t.Key (wk). A window
// that stays stays in the cache, which the checkpoint writes back.
func (o *windowOp) fireCached(ctx pipeline.Context, t state.Timer, wk *windowKey, c *cachedWindow, wm int64) error {
	_, drop, err := o.fire(ctx, t, c, wm)
	if err != nil || !drop {
		return err
	}
	wk.drop(c)
	o.cached--
	if c.inStore {
		return o.wins.Remove(t.Key, startKey(c.start))
	}
	return nil
}

// fire emits the result of window c of t.Key the timer is due for: on
// time once the watermark passed its end, early if it changed since its
// last early result. changed says c changed; drop, that it is past its
// lateness and goes.
func (o *windowOp) fire(ctx pipeline.Context, t state.Timer, c *cachedWindow, wm int64) (changed, drop bool, err error) {
	switch {
	case !c.fired && c.end <= wm:
		if err := o.emit(ctx, t.Key, c.start, c.end, c.acc, "on_time"); err != nil {
			return false, false, err
		}
		c.fired, c.early, changed = true, false, true
	case t.Domain == state.ProcessingTime && !c.fired && c.early:
		if err := o.emit(ctx, t.Key, c.start, c.end, c.acc, "early"); err != nil {
			return false, false, err
		}
		c.early, changed = false, true
	}
	if c.fired && c.end+o.def.lateness <= wm {
		return changed, true, nil
	}
	if changed && c.fired && o.def.lateness > 0 {
		err = o.timers.Set(t.Key, time.UnixMilli(c.end+o.def.lateness), o.domain())
	}
	return changed, false, err
}

// emit sends the result of window [start, end) of key.
func (o *windowOp) emit(ctx pipeline.Context, key []byte, start, end int64, acc map[string]any, timing string) error {
	out := make(map[string]any, len(o.def.fields)+4)
	for _, f := range o.def.fields {
		v, ok := acc[f.name]
		if !ok {
			continue
		}
		if f.kind == aggAvg {
			if pair, _ := v.([]any); len(pair) == 2 {
				sum, _ := toFloat(pair[0])
				n, _ := toFloat(pair[1])
				if n > 0 {
					v = sum / n
				}
			}
		}
		out[f.name] = v
	}
	out["key"], out["window_start"], out["window_end"], out["timing"] = string(key), start, end, timing
	r := &pipeline.Record{
		Key:       pipeline.RawValue(slices.Clone(key), pipeline.String),
		Value:     pipeline.ObjectValue(out),
		Timestamp: time.UnixMilli(end - 1),
	}
	ctx.Emit(r)
	return nil
}

func asInt64(x any) int64 {
	switch t := x.(type) {
	case int:
		return int64(t)
	case int64:
		return t
	case float64:
		return int64(t)
	}
	return 0
}

func asInt(x any) int { return int(asInt64(x)) }
