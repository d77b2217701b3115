package state

// Backend holds the committed state of stores: a cache of their changelogs
// plus the changelog offset each has applied. Memory and Pebble are the
// implementations. A backend is shared by all the stores of a process and
// safe for concurrent use; each store is used by one goroutine at a time.
type Backend interface {
	// Close releases the backend. Every store opened on it must be closed
	// first.
	Close() error

	open(name string, task int32) (table, error)
	drop(name string, task int32) error
}

// table is one store's committed state in a backend. Keys and values are
// changelog keys and values (see encoding.go). Only the store that opened it
// uses it.
type table interface {
	// get returns the committed value of k. The slice is read-only and
	// valid until the next call on the table.
	get(k []byte) (v []byte, ok bool, err error)
	// scanGroup calls fn for each committed entry of the map group (a
	// prefix ending in subMap), in no particular order. k and v are only
	// valid during the call; fn must not call the table.
	scanGroup(group []byte, fn func(k, v []byte) error) error
	// expire hands fn the committed entries whose expiry is at or before
	// now, earliest first, visiting at most limit index entries. It
	// resumes after the entries it handed out since the last commit or
	// rollback, which will be written (deleted or rewritten) by the next
	// commit or handed out again after a rollback. k is only valid
	// during the call.
	expire(now int64, limit int, fn func(exp int64, k []byte)) error
	// commit applies ws and records applied (and fp unless "") atomically.
	// A nil value deletes. The table copies what it keeps: ws belongs
	// to the caller.
	commit(ws []write, applied int64, fp string) error
	// rollback forgets what expire handed out since the last commit.
	rollback()
	appliedOffset() int64
	fingerprint() string
	stats() tableStats
	release()
	// expireWork counts the work done by expire: heap comparisons
	// (memory) or index entries visited (pebble). Tests use it to check
	// expiry never scans the store.
	expireWork() int64
}

// write is one key's new committed value.
type write struct {
	key, val []byte
	// prev is the committed expiry of key if known (0: none), -1 if not:
	// the pebble backend looks it up to delete the old index entry.
	prev int64
}

type tableStats struct {
	keys      int64 // -1: not counted
	bytes     int64 // approximate memory held
	diskBytes int64
}
