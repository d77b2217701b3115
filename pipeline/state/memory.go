package state

import (
	"bytes"
	"fmt"
	"hash/maphash"
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
		t = newMemTable(m)
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

// memTable is one store's committed state: its entries in a slice, their
// keys and values in blocks of bytes (an arena), a hash index of its own
// from key to entry, and a min-heap of the entries with an expiry, by
// (expiry, key). None of it holds a pointer per key: a table of millions
// of keys is a few large objects to the garbage collector, not millions
// of small ones (restoring into a map of pointers spent about a third of
// its time in the collector, and every collection while such a table
// lived marked all of it).
type memTable struct {
	m     *Memory
	inUse bool // guarded by m.mu

	seed    maphash.Seed
	slots   []uint64 // the index, by linear probing: 0 is empty, else hash<<32 | entry+1
	entries []memEntry
	free    []int32 // entries not in use
	n       int     // entries in use
	data    arena
	groups  map[string]map[string]struct{} // map group → its keys
	heap    []int32                        // entries
	pending []int32                        // popped from heap by expire since the last commit
	applied int64
	fp      string
	work    int64

	compactions int // tests read it
}

type memEntry struct {
	key, val span
	exp      int64
	hidx     int32 // index in heap, -1 when not in it
	used     bool
}

const memEntrySize = int64(unsafe.Sizeof(memEntry{}))

func newMemTable(m *Memory) *memTable {
	return &memTable{m: m, seed: maphash.MakeSeed(), groups: map[string]map[string]struct{}{}, applied: -1, data: arena{cur: -1}}
}

// span is where bytes are in an arena.
type span struct{ blk, off, n uint32 }

// arena holds bytes that are written once: a table's keys and values.
// Bytes are appended to the last block with room, of 4 KiB to 1 MiB,
// each block twice the size of the one before; a value longer than
// ownBlock gets a block of its own. Nothing is freed one by one: a value
// replaced or deleted is dead, and once the dead bytes outnumber the live
// ones the table copies what lives into a new arena (compact). Blocks
// are never written where a slice handed out points, so a value read
// stays as it was whatever the table does next.
type arena struct {
	blocks     [][]byte
	cur        int   // the block appended to, -1 none
	held       int64 // bytes of all blocks
	live, dead int64 // bytes of spans in use and of spans dropped
}

const (
	arenaFirstBlock = 4 << 10
	arenaMaxBlock   = 1 << 20
	ownBlock        = 16 << 10
	// compactAfter is the fewest dead bytes worth a compaction: a small
	// table rewritten often copies itself no more than every so many
	// bytes written.
	compactAfter = 256 << 10
)

// noBytes is the value of an empty span: present, not nil.
var noBytes = []byte{}

func (a *arena) add(b []byte) span {
	n := len(b)
	if n == 0 {
		return span{}
	}
	a.live += int64(n)
	if n > ownBlock {
		a.blocks = append(a.blocks, bytes.Clone(b))
		a.held += int64(n)
		return span{blk: uint32(len(a.blocks) - 1), n: uint32(n)}
	}
	if a.cur < 0 || cap(a.blocks[a.cur])-len(a.blocks[a.cur]) < n {
		size := arenaFirstBlock
		if a.cur >= 0 {
			size = min(2*cap(a.blocks[a.cur]), arenaMaxBlock)
		}
		a.blocks = append(a.blocks, make([]byte, 0, size))
		a.cur = len(a.blocks) - 1
		a.held += int64(size)
	}
	blk := a.blocks[a.cur]
	off := len(blk)
	a.blocks[a.cur] = append(blk, b...)
	return span{blk: uint32(a.cur), off: uint32(off), n: uint32(n)}
}

// bytes returns the bytes at s, with no room to append.
func (a *arena) bytes(s span) []byte {
	if s.n == 0 {
		return noBytes
	}
	end := s.off + s.n
	return a.blocks[s.blk][s.off:end:end]
}

func (a *arena) drop(s span) {
	a.live -= int64(s.n)
	a.dead += int64(s.n)
}

// reserve sizes an empty table for n keys.
func (t *memTable) reserve(n int) {
	if t.n > 0 || n <= 0 {
		return
	}
	t.entries = make([]memEntry, 0, n)
	t.free = nil
	t.slots = make([]uint64, slotsFor(n))
}

// slotsFor returns the size of an index for n keys: a power of two at
// least 4/3 of n, so that it is at most three quarters full.
func slotsFor(n int) int {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return size
}

func (t *memTable) hash(k []byte) uint32 { return uint32(maphash.Bytes(t.seed, k)) }

// find returns the slot of k and whether k is there; when it is not, the
// slot is the empty one k would go in (-1 when the index has no slots).
func (t *memTable) find(k []byte, h uint32) (int, bool) {
	if len(t.slots) == 0 {
		return -1, false
	}
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return int(i), false
		}
		if uint32(s>>32) == h && bytes.Equal(t.data.bytes(t.entries[uint32(s)-1].key), k) {
			return int(i), true
		}
	}
}

// at returns the entry in slot i.
func (t *memTable) at(i int) int32 { return int32(uint32(t.slots[i]) - 1) }

// resize rebuilds the index with size slots.
func (t *memTable) resize(size int) {
	old := t.slots
	t.slots = make([]uint64, size)
	mask := uint32(size - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := uint32(s>>32) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// unslot empties slot i, moving back the entries after it that would
// not be found past the hole (deletion without tombstones).
func (t *memTable) unslot(i int) {
	mask := len(t.slots) - 1
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s == 0 {
			break
		}
		home := int(uint32(s>>32)) & mask
		// s stays if its home is cyclically in (i, j].
		if (i < j && i < home && home <= j) || (i > j && (i < home || home <= j)) {
			continue
		}
		t.slots[i] = s
		i = j
	}
	t.slots[i] = 0
}

func (t *memTable) get(k []byte) ([]byte, bool, error) {
	i, ok := t.find(k, t.hash(k))
	if !ok {
		return nil, false, nil
	}
	return t.data.bytes(t.entries[t.at(i)].val), true, nil
}

// has reports whether the table holds k.
func (t *memTable) has(k string) bool {
	b := unsafe.Slice(unsafe.StringData(k), len(k))
	_, ok := t.find(b, t.hash(b))
	return ok
}

func (t *memTable) scanGroup(group []byte, fn func(k, v []byte) error) error {
	for k := range t.groups[string(group)] {
		kb := []byte(k)
		v, found, _ := t.get(kb)
		if !found {
			continue
		}
		if err := fn(kb, v); err != nil {
			return err
		}
	}
	return nil
}

func (t *memTable) expire(now int64, limit int, fn func(exp int64, k []byte)) error {
	for ; limit > 0 && len(t.heap) > 0; limit-- {
		n := t.heap[0]
		e := &t.entries[n]
		t.work++
		if e.exp > now {
			break
		}
		t.remove(0)
		// Kept aside until the commit writes the key (Store.Expire makes
		// sure it does) or a rollback puts it back.
		t.pending = append(t.pending, n)
		fn(e.exp, t.data.bytes(e.key))
	}
	return nil
}

func (t *memTable) commit(ws []write, applied int64, fp string) error {
	for _, w := range ws {
		h := t.hash(w.key)
		i, found := t.find(w.key, h)
		if w.val == nil {
			if found {
				t.delete(i)
			}
			continue
		}
		var n int32
		if found {
			n = t.at(i)
			t.data.drop(t.entries[n].val)
		} else {
			if i < 0 || (t.n+1)*4 > len(t.slots)*3 {
				t.resize(slotsFor(t.n + 1))
				i, _ = t.find(w.key, h)
			}
			n = t.newEntry()
			t.entries[n].key = t.data.add(w.key)
			t.slots[i] = uint64(h)<<32 | uint64(n+1)
			if g := mapGroupLen(w.key); g > 0 {
				k := string(w.key)
				gs := t.groups[k[:g]]
				if gs == nil {
					gs = map[string]struct{}{}
					t.groups[k[:g]] = gs
				}
				gs[k] = struct{}{}
			}
		}
		e := &t.entries[n]
		e.val = t.data.add(w.val)
		e.exp = valueExp(w.val)
		switch {
		case e.hidx >= 0 && e.exp > 0:
			t.fix(int(e.hidx))
		case e.hidx >= 0:
			t.remove(int(e.hidx))
		case e.exp > 0:
			t.push(n)
		}
	}
	t.applied = applied
	if fp != "" {
		t.fp = fp
	}
	// Every key expire handed out is in ws; this only matters if not.
	t.rollback()
	if t.data.dead > t.data.live && t.data.dead >= compactAfter {
		t.compact()
	}
	return nil
}

func (t *memTable) newEntry() int32 {
	t.n++
	if k := len(t.free); k > 0 {
		n := t.free[k-1]
		t.free = t.free[:k-1]
		t.entries[n] = memEntry{hidx: -1, used: true}
		return n
	}
	t.entries = append(t.entries, memEntry{hidx: -1, used: true})
	return int32(len(t.entries) - 1)
}

// delete removes the entry in slot i.
func (t *memTable) delete(i int) {
	n := t.at(i)
	e := &t.entries[n]
	if e.hidx >= 0 {
		t.remove(int(e.hidx))
	}
	key := t.data.bytes(e.key)
	if g := mapGroupLen(key); g > 0 {
		gs := t.groups[string(key[:g])]
		delete(gs, string(key))
		if len(gs) == 0 {
			delete(t.groups, string(key[:g]))
		}
	}
	t.data.drop(e.key)
	t.data.drop(e.val)
	t.entries[n] = memEntry{hidx: -1}
	t.free = append(t.free, n)
	t.n--
	t.unslot(i)
}

// compact copies the live keys and values into a new arena.
func (t *memTable) compact() {
	a := arena{cur: -1}
	for n := range t.entries {
		if e := &t.entries[n]; e.used {
			e.key = a.add(t.data.bytes(e.key))
			e.val = a.add(t.data.bytes(e.val))
		}
	}
	t.data = a
	t.compactions++
}

func (t *memTable) rollback() {
	for _, n := range t.pending {
		if e := &t.entries[n]; e.used && e.hidx < 0 && e.exp > 0 {
			t.push(n)
		}
	}
	t.pending = t.pending[:0]
}

func (t *memTable) appliedOffset() int64 { return t.applied }
func (t *memTable) fingerprint() string  { return t.fp }
func (t *memTable) expireWork() int64    { return t.work }

// stats counts the memory the table holds: its blocks of keys and values
// (dead ones included), its entries, index and heap.
func (t *memTable) stats() tableStats {
	return tableStats{keys: int64(t.n), bytes: t.data.held + int64(cap(t.entries))*memEntrySize + int64(len(t.slots))*8 + int64(cap(t.heap))*4}
}

func (t *memTable) release() {
	t.m.mu.Lock()
	t.inUse = false
	t.m.mu.Unlock()
}

// The heap of entries, by (expiry, key). less counts its calls in work.

func (t *memTable) less(i, j int) bool {
	t.work++
	a, b := &t.entries[t.heap[i]], &t.entries[t.heap[j]]
	if a.exp != b.exp {
		return a.exp < b.exp
	}
	return bytes.Compare(t.data.bytes(a.key), t.data.bytes(b.key)) < 0
}

func (t *memTable) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.entries[t.heap[i]].hidx = int32(i)
	t.entries[t.heap[j]].hidx = int32(j)
}

func (t *memTable) push(n int32) {
	t.entries[n].hidx = int32(len(t.heap))
	t.heap = append(t.heap, n)
	t.up(len(t.heap) - 1)
}

func (t *memTable) remove(i int) {
	last := len(t.heap) - 1
	n := t.heap[i]
	if i != last {
		t.swap(i, last)
	}
	t.heap = t.heap[:last]
	t.entries[n].hidx = -1
	if i != last {
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
