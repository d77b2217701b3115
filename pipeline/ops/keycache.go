package ops

import "github.com/pipeline-run/pipeline/pipeline/state"

// keyCache holds, decoded, the state of the keys a join touched: the
// operator reads a key from its store once, works on the cached form, and
// writes what changed back once per checkpoint (Flush), as the aggregate
// caches its accumulators. A record that comes and goes between two
// checkpoints, as most of a join's do, never reaches the store: per record
// that saved a store write, a read of the key's entries and a removal,
// most of a join's work.
//
// It holds up to maxCached keys, of the store's generation gen: an abort or
// a restore drops it, as what it holds is of a state that is no more.
type keyCache[K cacheEntry] struct {
	st    *state.Store
	max   int // maxCached, but in tests
	gen   uint64
	keys  map[string]K
	dirty []K // the keys with changes the store has not seen
}

// cacheEntry is a key of a keyCache: a pointer to a struct embedding
// cached.
type cacheEntry interface{ base() *cached }

// cached is what every key of a keyCache has.
type cached struct {
	key string
	// gone lists the map keys of stored entries the key dropped since
	// the store last saw it.
	gone  []string
	dirty bool
}

func (c *cached) base() *cached { return c }

func newKeyCache[K cacheEntry](st *state.Store) keyCache[K] {
	return keyCache[K]{st: st, max: maxCached, keys: map[string]K{}}
}

// sync drops the cache if the store's content changed under it.
func (c *keyCache[K]) sync() {
	if g := c.st.Generation(); g != c.gen {
		clear(c.keys)
		clear(c.dirty)
		c.dirty = c.dirty[:0]
		c.gen = g
	}
}

// get returns key's cached state.
func (c *keyCache[K]) get(key []byte) (K, bool) {
	c.sync()
	k, ok := c.keys[string(key)]
	return k, ok
}

// add caches k, a key read from the store, first writing the dirty keys
// back and emptying the cache if it is full.
func (c *keyCache[K]) add(k K, write func(K) error) error {
	if len(c.keys) >= c.max {
		if err := c.flush(write); err != nil {
			return err
		}
		clear(c.keys)
	}
	c.keys[k.base().key] = k
	return nil
}

// touch lists k as changed since the store last saw it.
func (c *keyCache[K]) touch(k K) {
	if b := k.base(); !b.dirty {
		b.dirty = true
		c.dirty = append(c.dirty, k)
	}
}

// flush writes the dirty keys to the store with write.
func (c *keyCache[K]) flush(write func(K) error) error {
	c.sync()
	for _, k := range c.dirty {
		if err := write(k); err != nil {
			return err
		}
		b := k.base()
		clear(b.gone)
		b.gone, b.dirty = b.gone[:0], false
	}
	clear(c.dirty)
	c.dirty = c.dirty[:0]
	return nil
}
