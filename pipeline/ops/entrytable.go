package ops

import "hash/maphash"

// entryTable is the aggregate cache's index from key to entry: open
// addressing, linear probing, each slot the key's hash beside its entry.
// A lookup of a key that is there reads one slot (hash equal: then the
// entry, which the fold reads next anyway) where a Go map read its
// control word, its slot and the key's bytes: with 10,000 keys the cache
// outgrows a core's cache memory and each of those was a miss a record.
// Entries are never removed one by one: the cache is emptied whole.
type entryTable struct {
	seed  maphash.Seed
	slots []entrySlot // len a power of two, or 0
	n     int
}

type entrySlot struct {
	h uint64
	e *aggEntry // nil: empty
}

const entryTableMin = 64 // slots of a new table

func newEntryTable() *entryTable { return &entryTable{seed: maphash.MakeSeed()} }

// get returns key's entry, nil if none, and key's hash for put.
func (t *entryTable) get(key []byte) (*aggEntry, uint64) {
	h := maphash.Bytes(t.seed, key)
	if len(t.slots) == 0 {
		return nil, h
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil, h
		}
		if s.h == h && s.e.key == string(key) {
			return s.e, h
		}
	}
}

// put adds e, whose key is not in t, with its key's hash h.
func (t *entryTable) put(h uint64, e *aggEntry) {
	// At most three quarters full: probes stay short.
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	t.insert(h, e)
	t.n++
}

func (t *entryTable) insert(h uint64, e *aggEntry) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = entrySlot{h, e}
}

func (t *entryTable) grow() {
	old := t.slots
	t.slots = make([]entrySlot, max(2*len(old), entryTableMin))
	for _, s := range old {
		if s.e != nil {
			t.insert(s.h, s.e)
		}
	}
}

func (t *entryTable) len() int { return t.n }

// each calls fn with every entry, in no particular order; fn must not
// change t.
func (t *entryTable) each(fn func(e *aggEntry) error) error {
	if t.n == 0 {
		return nil
	}
	for _, s := range t.slots {
		if s.e != nil {
			if err := fn(s.e); err != nil {
				return err
			}
		}
	}
	return nil
}

// reset empties t. It keeps its slots unless they are many more than
// the entries it held needed, so that a burst of keys does not leave every
// later reset clearing a large table.
func (t *entryTable) reset() {
	if t.n == 0 {
		return
	}
	if len(t.slots) > entryTableMin && 8*t.n < len(t.slots) {
		t.slots = nil
	} else {
		clear(t.slots)
	}
	t.n = 0
}
