package state

import (
	"bytes"
	"fmt"
	"sync"
	"unsafe"
)

// Memory is the in-memory backend. Its tables outlive the stores that use
// them: a task that is closed and opened again in the same process restores
// only the changelog tail. Reset frees a task's state for good (do it when a
// task is revoked and not coming back).
type Memory struct {
	mu     sync.Mutex
	tables map[string]*memTable // nil once closed
}

// NewMemory returns an empty memory backend.
func NewMemory() *Memory { return &Memory{tables: map[string]*memTable{}} }

// Close drops all state. It fails while a store is open.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.tables {
		if t.inUse {
			return fmt.Errorf("closing memory state backend: %w", ErrInUse)
		}
	}
	m.tables = nil
	return nil
}

func (m *Memory) open(name string, task int32) (table, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tables == nil {
		return nil, ErrClosed
	}
	ns := namespace(name, task)
	t := m.tables[ns]
	if t == nil {
		t = &memTable{
			m:       m,
			data:    map[string]*memEntry{},
			groups:  map[string]map[string]struct{}{},
			applied: -1,
		}
		m.tables[ns] = t
	}
	if t.inUse {
		return nil, ErrInUse
	}
	t.inUse = true
	return t, nil
}

func (m *Memory) drop(name string, task int32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tables == nil {
		return ErrClosed
	}
	ns := namespace(name, task)
	if t := m.tables[ns]; t != nil && t.inUse {
		return ErrInUse
	}
	delete(m.tables, ns)
	return nil
}

// memEntryOverhead approximates the memory a committed entry holds besides
// its key and value bytes: the entry, its map slot and a heap slot.
const memEntryOverhead = 112

// memTable is a map of committed entries, an index of the map entries by
// group, and a min-heap of the entries with an expiry, by (expiry, key).
type memTable struct {
	m     *Memory
	inUse bool // guarded by m.mu

	data    map[string]*memEntry
	groups  map[string]map[string]struct{} // map group → its keys
	heap    []*memEntry
	pending []*memEntry // popped from heap by expire since the last commit
	applied int64
	fp      string
	bytes   int64
	work    int64

	restored slabs // where a restore's new entries come from
}

type memEntry struct {
	key  string
	val  []byte
	exp  int64
	hidx int // index in heap, -1 when not in it
}

// slabs hands out the entries, keys and first values a restore creates
// from blocks of many, instead of three allocations per key: a restore
// writes up to millions of keys, one after another, and allocating them
// was a third of its work. A block lives while any of its keys or values
// does, so at most the memory of the keys and first values a restore
// created stays held; a key's later values, and keys written after the
// restore, are allocated one by one, since values that come and go would
// each pin a block.
type slabs struct {
	entries []memEntry
	keys    []byte
	vals    []byte
}

const (
	slabEntries  = 256
	slabKeyBytes = 16 << 10
)

func (s *slabs) entry(key []byte) *memEntry {
	if len(s.entries) == 0 {
		s.entries = make([]memEntry, slabEntries)
	}
	e := &s.entries[0]
	s.entries = s.entries[1:]
	if k := inBlock(&s.keys, key); k != nil {
		// The bytes are never written again: the next keys go after
		// them, and a new block replaces a full one.
		e.key = unsafe.String(&k[0], len(k))
	} else {
		e.key = string(key)
	}
	e.hidx = -1
	return e
}

// value returns a copy of val, from a block of values when it is small.
func (s *slabs) value(val []byte) []byte {
	if v := inBlock(&s.vals, val); v != nil {
		return v
	}
	return bytes.Clone(val)
}

// inBlock returns a copy of b appended to block, starting a new block of
// slabKeyBytes when it is full, with its capacity cut to its length, so
// that appending to it cannot reach into what comes next; nil when b is
// empty or too large to share a block.
func inBlock(block *[]byte, b []byte) []byte {
	if len(b) == 0 || len(b) > slabKeyBytes/4 {
		return nil
	}
	if cap(*block)-len(*block) < len(b) {
		*block = make([]byte, 0, slabKeyBytes)
	}
	n := len(*block)
	*block = append(*block, b...)
	return (*block)[n:len(*block):len(*block)]
}

// reserve sizes an empty table for n keys.
func (t *memTable) reserve(n int) {
	if len(t.data) == 0 {
		t.data = make(map[string]*memEntry, n)
	}
}

func (t *memTable) get(k []byte) ([]byte, bool, error) {
	e, ok := t.data[string(k)]
	if !ok {
		return nil, false, nil
	}
	return e.val, true, nil
}

func (t *memTable) scanGroup(group []byte, fn func(k, v []byte) error) error {
	for k := range t.groups[string(group)] {
		if err := fn([]byte(k), t.data[k].val); err != nil {
			return err
		}
	}
	return nil
}

func (t *memTable) expire(now int64, limit int, fn func(exp int64, k []byte)) error {
	for ; limit > 0 && len(t.heap) > 0; limit-- {
		e := t.heap[0]
		t.work++
		if e.exp > now {
			break
		}
		t.remove(0)
		// Kept aside until the commit writes the key (Store.Expire makes
		// sure it does) or a rollback puts it back.
		t.pending = append(t.pending, e)
		fn(e.exp, []byte(e.key))
	}
	return nil
}

func (t *memTable) commit(ws []write, applied int64, fp string, borrowed bool) error {
	for _, w := range ws {
		e := t.data[string(w.key)]
		if w.val == nil {
			if e != nil {
				if e.hidx >= 0 {
					t.remove(e.hidx)
				}
				delete(t.data, e.key)
				t.ungroup(e.key)
				t.bytes -= int64(len(e.key) + len(e.val) + memEntryOverhead)
			}
			continue
		}
		val := w.val
		if e == nil {
			if borrowed {
				e = t.restored.entry(w.key)
				val = t.restored.value(val)
			} else {
				e = &memEntry{key: string(w.key), hidx: -1}
			}
			t.data[e.key] = e
			if g := mapGroupLen(w.key); g > 0 {
				gs := t.groups[e.key[:g]]
				if gs == nil {
					gs = map[string]struct{}{}
					t.groups[e.key[:g]] = gs
				}
				gs[e.key] = struct{}{}
			}
			t.bytes += int64(len(e.key) + memEntryOverhead)
		} else if borrowed {
			val = bytes.Clone(val)
		}
		t.bytes += int64(len(val) - len(e.val))
		e.val = val
		e.exp = valueExp(val)
		switch {
		case e.hidx >= 0 && e.exp > 0:
			t.fix(e.hidx)
		case e.hidx >= 0:
			t.remove(e.hidx)
		case e.exp > 0:
			t.push(e)
		}
	}
	t.applied = applied
	if fp != "" {
		t.fp = fp
	}
	// Every key expire handed out is in ws; this only matters if not.
	t.rollback()
	return nil
}

func (t *memTable) ungroup(key string) {
	g := mapGroupLen([]byte(key))
	if g == 0 {
		return
	}
	gs := t.groups[key[:g]]
	delete(gs, key)
	if len(gs) == 0 {
		delete(t.groups, key[:g])
	}
}

func (t *memTable) rollback() {
	for _, e := range t.pending {
		if e.hidx < 0 && e.exp > 0 && t.data[e.key] == e {
			t.push(e)
		}
	}
	clear(t.pending)
	t.pending = t.pending[:0]
}

func (t *memTable) appliedOffset() int64 { return t.applied }
func (t *memTable) fingerprint() string  { return t.fp }
func (t *memTable) expireWork() int64    { return t.work }

func (t *memTable) stats() tableStats {
	return tableStats{keys: int64(len(t.data)), bytes: t.bytes}
}

func (t *memTable) release() {
	t.m.mu.Lock()
	t.inUse = false
	t.m.mu.Unlock()
}

// The heap, by (expiry, key). less counts its calls in work.

func (t *memTable) less(i, j int) bool {
	t.work++
	a, b := t.heap[i], t.heap[j]
	if a.exp != b.exp {
		return a.exp < b.exp
	}
	return a.key < b.key
}

func (t *memTable) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].hidx = i
	t.heap[j].hidx = j
}

func (t *memTable) push(e *memEntry) {
	e.hidx = len(t.heap)
	t.heap = append(t.heap, e)
	t.up(e.hidx)
}

func (t *memTable) remove(i int) {
	n := len(t.heap) - 1
	e := t.heap[i]
	if i != n {
		t.swap(i, n)
	}
	t.heap[n] = nil
	t.heap = t.heap[:n]
	e.hidx = -1
	if i != n {
		t.fix(i)
	}
}

func (t *memTable) fix(i int) {
	if !t.down(i) {
		t.up(i)
	}
}

func (t *memTable) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *memTable) down(i int) bool {
	start, n := i, len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && t.less(r, l) {
			c = r
		}
		if !t.less(c, i) {
			break
		}
		t.swap(i, c)
		i = c
	}
	return i > start
}
