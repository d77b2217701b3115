package ops

import "hash/maphash"

// keyTable is a cache's index from a key to its entry (an aggregate's
// accumulators, a window step's windows): open addressing, linear probing,
// each slot the key's hash and the key beside its entry. A lookup of a key
// that is there reads one slot and the key's bytes where a Go map read its
// control word, its slot and the key's bytes: with 10,000 keys the cache
// outgrows a core's cache memory and each of those was a miss a record.
// Entries are never removed one by one: the table is emptied whole.
type keyTable[E any] struct {
	seed  maphash.Seed
	slots []keySlot[E] // len a power of two, or 0
	n     int
}

type keySlot[E any] struct {
	h   uint64
	key string
	e   *E // nil: empty
}

const keyTableMin = 64 // slots of a new table

func newKeyTable[E any]() *keyTable[E] { return &keyTable[E]{seed: maphash.MakeSeed()} }

// get returns key's entry, nil if none, and key's hash for put.
func (t *keyTable[E]) get(key []byte) (*E, uint64) {
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
		if s.h == h && s.key == string(key) {
			return s.e, h
		}
	}
}

// put adds e under key, which is not in t and hashes to h.
func (t *keyTable[E]) put(h uint64, key string, e *E) {
	// At most three quarters full: probes stay short.
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	t.insert(keySlot[E]{h, key, e})
	t.n++
}

func (t *keyTable[E]) insert(s keySlot[E]) {
	mask := uint64(len(t.slots) - 1)
	i := s.h & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *keyTable[E]) grow() {
	old := t.slots
	t.slots = make([]keySlot[E], max(2*len(old), keyTableMin))
	for _, s := range old {
		if s.e != nil {
			t.insert(s)
		}
	}
}

func (t *keyTable[E]) len() int { return t.n }

// each calls fn with every entry, in no particular order; fn must not
// change t.
func (t *keyTable[E]) each(fn func(e *E) error) error {
	return t.eachKey(func(_ string, e *E) error { return fn(e) })
}

// eachKey is each with every entry's key.
func (t *keyTable[E]) eachKey(fn func(key string, e *E) error) error {
	if t.n == 0 {
		return nil
	}
	for _, s := range t.slots {
		if s.e != nil {
			if err := fn(s.key, s.e); err != nil {
				return err
			}
		}
	}
	return nil
}

// reset empties t. It keeps its slots unless they are many more than
// the entries it held needed, so that a burst of keys does not leave every
// later reset clearing a large table.
func (t *keyTable[E]) reset() {
	if t.n == 0 {
		return
	}
	if len(t.slots) > keyTableMin && 8*t.n < len(t.slots) {
		t.slots = nil
	} else {
		clear(t.slots)
	}
	t.n = 0
}
