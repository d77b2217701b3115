package state

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ChangelogRecord is a record of a store's changelog partition: a key and a
// full value, or a nil Value for a tombstone.
type ChangelogRecord struct {
	Key   []byte
	Value []byte
	// Offset is the record's offset in the changelog partition. Changes
	// sets it to -1; the caller of Restore sets it from the record read.
	Offset int64
}

// Timers returns the store's timers states, in the order they were
// registered.
func (s *Store) Timers() []*Timers { return s.timers }

// Stats describe a store.
type Stats struct {
	Keys      int64 // committed entries (map entries count one each); -1 where the backend does not count them (pebble)
	Dirty     int   // entries changed since the last Commit or Abort
	Bytes     int64 // approximate memory held: the committed data (memory backend) plus the uncommitted changes
	DiskBytes int64 // estimated size on disk (pebble)
	Expired   int64 // entries removed because their TTL passed, since Open
}

// Store is one operator's keyed state in one task. See the package comment
// for the checkpoint protocol.
type Store struct {
	name  string
	task  int32
	fp    string
	clock Clock
	tab   table

	states map[string]*stateInfo

	// The uncommitted overlay: changelog key → entry. ovGroups lists the
	// overlay's map entries by group, for Map.Entries and Clear.
	ov       map[string]*entry
	ovGroups map[string][]ovEntry

	sealed   bool              // Changes was called; writes wait for Commit or Abort
	changes  []ChangelogRecord // what Changes returned
	fpLogged bool              // the fingerprint is in the changelog (and in the backend)
	failed   error             // a Commit or Restore failed: the store must be reopened
	closed   bool

	expired int64
	// taskCount is the number of tasks of the step (SetTaskCount), which
	// operator state records with each value; 0 if not known.
	taskCount int32
	// gen counts the changes of the store's content other than writes
	// through its states (aborts, restores): in-memory indexes of the
	// state (Timers) rebuild when it moved.
	gen    uint64
	timers []*Timers
	// Scratch buffers: kbuf for keys, wbuf for values being written,
	// ebuf for list elements, gbuf for map groups.
	kbuf, wbuf, ebuf, gbuf []byte
	ws                     []write
}

// entry is an uncommitted change.
type entry struct {
	val  []byte // header + payload; nil: deleted
	prev int64  // the key's committed expiry: 0 none, -1 not known
}

// stateInfo is a registered state.
type stateInfo struct {
	name   string
	kind   string
	prefix []byte
	ttl    int64 // nanoseconds; 0: none
	onRead bool  // reads refresh the expiry
	// check decodes a payload of the state as its reads would, so that
	// Restore refuses a value the operator could not read later.
	check func(payload []byte) error
}

// Open opens the store of operator state name for task on b. fingerprint
// identifies the operator's definition; if the backend holds state written
// under another fingerprint, Open returns an *IncompatibleError (wrapping
// ErrIncompatible). clock measures TTLs; nil means SystemClock.
//
// After Open the runtime restores the store: it reads the changelog from
// AppliedOffset()+1 and hands the records to Restore.
func Open(b Backend, name string, task int32, fingerprint string, clock Clock) (*Store, error) {
	if name == "" {
		return nil, errors.New("opening state store: empty name")
	}
	if fingerprint == "" {
		return nil, fmt.Errorf("opening state store %q task %d: empty fingerprint", name, task)
	}
	if clock == nil {
		clock = SystemClock
	}
	tab, err := b.open(name, task)
	if err != nil {
		return nil, fmt.Errorf("opening state store %q task %d: %w", name, task, err)
	}
	if have := tab.fingerprint(); have != "" && have != fingerprint {
		applied := tab.appliedOffset()
		tab.release()
		return nil, &IncompatibleError{Store: name, Task: task, Have: have, Want: fingerprint, Offset: -1, Applied: applied}
	}
	return &Store{
		name:     name,
		task:     task,
		fp:       fingerprint,
		clock:    clock,
		tab:      tab,
		states:   map[string]*stateInfo{},
		ov:       map[string]*entry{},
		ovGroups: map[string][]ovEntry{},
		fpLogged: tab.fingerprint() != "",
	}, nil
}

// Reset deletes the state of store name for task from b, with its applied
// offset and fingerprint. The store must not be open.
//
// The changelog still holds the old state, and a restore would bring it
// back (or refuse it, if the fingerprint changed): the caller must also
// delete the changelog partition's records (kadm DeleteRecords up to its
// end) before the task runs again.
func Reset(b Backend, name string, task int32) error {
	if err := b.drop(name, task); err != nil {
		return fmt.Errorf("resetting state store %q task %d: %w", name, task, err)
	}
	return nil
}

// freshTimers counts the timers set since the last Changes, which the
// store has not seen yet.
func (s *Store) freshTimers() int {
	n := 0
	for _, t := range s.timers {
		n += len(t.fresh)
	}
	return n
}

// Name returns the store's name.
func (s *Store) Name() string { return s.name }

// Task returns the store's task.
func (s *Store) Task() int32 { return s.task }

// ExpectRestore tells the store that a restore of up to n changelog
// records is about to begin. The memory backend sizes an empty table for
// them at once (up to 4M keys) rather than growing it batch by batch:
// growing a 1M-key table was an eighth of the restore's CPU.
func (s *Store) ExpectRestore(n int64) {
	if r, ok := s.tab.(interface{ reserve(n int) }); ok && n > 0 {
		r.reserve(int(min(n, maxReserve)))
	}
}

// maxReserve bounds ExpectRestore: a changelog's offsets overstate its
// keys by its updates and tombstones not compacted yet, and a table sized
// for all of them would hold memory for keys that never come.
const maxReserve = 4 << 20

// AppliedOffset returns the offset of the last changelog record the
// committed state includes, -1 if none: a restore reads the changelog from
// AppliedOffset()+1.
func (s *Store) AppliedOffset() int64 { return s.tab.appliedOffset() }

// Changes returns the store's changes since the last Commit or Abort, as
// changelog records sorted by key (the first checkpoint of a store also
// carries its fingerprint). Values whose TTL has passed become tombstones.
// The store is then sealed: writes fail with ErrSealed until Commit or
// Abort. Calling Changes again returns the same records.
//
// The records' slices belong to the store and must not be modified; they
// stay valid after Commit or Abort.
func (s *Store) Changes() []ChangelogRecord {
	if s.sealed || s.closed {
		return s.changes
	}
	for _, t := range s.timers {
		t.writeFresh()
	}
	// A key the memory table does not hold and the overlay deletes (one
	// written and removed again since the last commit, as a join's
	// buffered record) needs no tombstone: the changelog's last word on it
	// is already that it is gone, or there is none.
	mem, _ := s.tab.(*memTable)
	keys := make([]string, 0, len(s.ov))
	var now int64
	for k, e := range s.ov {
		if e.val != nil {
			if exp := valueExp(e.val); exp != 0 {
				if now == 0 {
					now = s.now()
				}
				if exp <= now {
					e.val = nil
					s.expired++
				}
			}
		}
		if e.val == nil && mem != nil && !mem.has(k) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	recs := make([]ChangelogRecord, 0, len(keys)+1)
	if !s.fpLogged {
		// fingerprintKey sorts before every data key.
		recs = append(recs, ChangelogRecord{Key: fingerprintKey, Value: []byte(s.fp), Offset: -1})
	}
	for _, k := range keys {
		recs = append(recs, ChangelogRecord{Key: []byte(k), Value: s.ov[k].val, Offset: -1})
	}
	s.sealed = true
	s.changes = recs
	return recs
}

// Commit makes the changes last returned by Changes the committed state,
// once the transaction that produced them has committed. lastOffset is the
// changelog offset of the last of them; the backend records it with the
// data, atomically. With no changes, pass -1: the applied offset never goes
// back.
//
// If Commit fails the store is in an unknown state: close it, open it again
// and restore it from the changelog.
func (s *Store) Commit(lastOffset int64) error {
	if err := s.usable(); err != nil {
		return err
	}
	if !s.sealed && (len(s.ov) > 0 || s.freshTimers() > 0 || !s.fpLogged) {
		return s.errorf("commit: the changes were not collected with Changes")
	}
	ws := s.ws[:0]
	fp := ""
	for _, r := range s.changes {
		if r.Key[0] == recMeta {
			fp = s.fp
			continue
		}
		ws = append(ws, write{key: r.Key, val: r.Value, prev: s.ov[string(r.Key)].prev})
	}
	err := s.tab.commit(ws, max(s.tab.appliedOffset(), lastOffset), fp)
	clear(ws)
	s.ws = ws[:0]
	if err != nil {
		s.failed = s.errorf("committing changes up to changelog offset %d: %w", lastOffset, err)
		return s.failed
	}
	if fp != "" {
		s.fpLogged = true
	}
	s.dropOverlay()
	return nil
}

// Abort drops the changes since the last Commit: the store's state is the
// last committed state again.
func (s *Store) Abort() error {
	if s.closed {
		return ErrClosed
	}
	s.dropOverlay()
	s.tab.rollback()
	s.gen++
	return nil
}

func (s *Store) dropOverlay() {
	for _, t := range s.timers {
		clear(t.fresh)
	}
	clear(s.ov)
	clear(s.ovGroups)
	s.sealed = false
	s.changes = nil
}

// Restore applies changelog records read back from the store's changelog
// partition (read_committed, in offset order), then records lastOffset, the
// offset of the last record read, as applied. Records at or before
// AppliedOffset are skipped, so restoring a range twice is harmless. Each
// call is applied atomically; call it once per fetched batch.
//
// Register the store's states (NewValue and the like) before restoring:
// each record is then checked against its state, whose codec must decode
// its value, and a record of a state that is not registered is refused. A
// store with no state registered checks the records' framing only.
//
// A record that cannot be decoded fails the call with a *CorruptError naming
// its offset, and a fingerprint record that differs from the store's with an
// *IncompatibleError; nothing of the batch is applied. The store must have no
// uncommitted changes.
func (s *Store) Restore(recs []ChangelogRecord, lastOffset int64) error {
	return s.restore(recs, lastOffset, true)
}

// CheckChangelog checks changelog records as Restore does, without
// applying them: every record, whatever AppliedOffset. It reads only what
// registering the states set (register them all first), so it may run on
// another goroutine while RestoreChecked applies other records: a restore
// can check the next batch while it applies this one.
func (s *Store) CheckChangelog(recs []ChangelogRecord) error {
	for _, r := range recs {
		if _, _, err := s.checkChangelog(r, true); err != nil {
			return err
		}
	}
	return nil
}

// RestoreChecked is Restore of records CheckChangelog passed: it applies
// them without checking their values again.
func (s *Store) RestoreChecked(recs []ChangelogRecord, lastOffset int64) error {
	return s.restore(recs, lastOffset, false)
}

func (s *Store) restore(recs []ChangelogRecord, lastOffset int64, check bool) error {
	if err := s.usable(); err != nil {
		return err
	}
	if s.sealed || len(s.ov) > 0 || s.freshTimers() > 0 {
		return s.errorf("restore: the store has uncommitted changes (Abort them first)")
	}
	applied := s.tab.appliedOffset()
	ws := s.ws[:0]
	if cap(ws) < len(recs) {
		ws = make([]write, 0, len(recs))
	}
	// The memory table applies writes in order, so a key written twice
	// ends with the last; pebble's index needs each key once, the last.
	var at map[string]int // key → index in ws
	if _, inOrder := s.tab.(*memTable); !inOrder {
		at = make(map[string]int, len(recs))
	}
	fp := ""
	for _, r := range recs {
		if r.Offset >= 0 && r.Offset <= applied {
			continue
		}
		meta, isFP, err := s.checkChangelog(r, check)
		if err != nil {
			return err
		}
		if meta {
			if isFP {
				fp = s.fp
			}
			continue
		}
		w := write{key: r.Key, val: r.Value, prev: -1}
		if at == nil {
			ws = append(ws, w)
		} else if i, ok := at[string(r.Key)]; ok {
			ws[i] = w
		} else {
			at[string(r.Key)] = len(ws)
			ws = append(ws, w)
		}
	}
	lastOffset = max(lastOffset, applied)
	s.gen++
	var err error
	if len(ws) > 0 || fp != "" || lastOffset != applied {
		err = s.tab.commit(ws, lastOffset, fp)
	}
	clear(ws)
	s.ws = ws[:0]
	if err != nil {
		s.failed = s.errorf("restoring up to changelog offset %d: %w", lastOffset, err)
		return s.failed
	}
	if fp != "" {
		s.fpLogged = true
	}
	return nil
}

// checkChangelog checks one changelog record: its key, and, if check,
// a data record's value against its state. It reports whether the record
// is metadata, and whether it is the store's fingerprint (a fingerprint
// record that is not the store's fails with an *IncompatibleError).
func (s *Store) checkChangelog(r ChangelogRecord, check bool) (meta, isFP bool, err error) {
	if !check && len(r.Key) > 0 && r.Key[0] == recData {
		return false, false, nil // parsed when it was checked
	}
	rk, err := parseKey(r.Key)
	if err != nil {
		return false, false, &CorruptError{Store: s.name, Task: s.task, Offset: r.Offset, Err: fmt.Errorf("key %q: %w", r.Key, err)}
	}
	if rk.meta != "" {
		if rk.meta != metaFingerprint {
			return false, false, &CorruptError{Store: s.name, Task: s.task, Offset: r.Offset, Err: fmt.Errorf("unknown metadata record %q", rk.meta)}
		}
		if r.Value == nil {
			return true, false, nil
		}
		if string(r.Value) != s.fp {
			return false, false, &IncompatibleError{Store: s.name, Task: s.task, Have: string(r.Value), Want: s.fp, Offset: r.Offset}
		}
		return true, true, nil
	}
	if err := s.checkRecord(rk, r.Value); err != nil {
		return false, false, &CorruptError{Store: s.name, Task: s.task, Offset: r.Offset, Err: fmt.Errorf("key %q: %w", r.Key, err)}
	}
	return false, false, nil
}

// checkRecord checks a changelog data record against the registered
// states: its state must be one of them (when any is), with the shape of
// its kind, and its value must decode as the state's reads decode it.
func (s *Store) checkRecord(rk recordKey, val []byte) error {
	var payload []byte
	if val != nil {
		_, p, err := parseValue(val)
		if err != nil {
			return fmt.Errorf("value: %w", err)
		}
		payload = p
	}
	if len(s.states) == 0 {
		return nil
	}
	st, ok := s.states[string(rk.state)]
	if !ok {
		names := make([]string, 0, len(s.states))
		for n := range s.states {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Errorf("state %q is not one the operator registers (%s)", rk.state, strings.Join(names, ", "))
	}
	if isMap := rk.group > 0; isMap != (st.kind == kindMap || st.kind == kindTimers) {
		return fmt.Errorf("not a record of %s state %q", st.kind, st.name)
	}
	if val != nil && st.check != nil {
		if err := st.check(payload); err != nil {
			return fmt.Errorf("value of %s state %q: %w", st.kind, st.name, err)
		}
	}
	return nil
}

// Expire removes committed entries whose TTL passed at now, earliest first,
// visiting at most limit entries of the expiry index: the work is proportional
// to what expires, never to the store's size. The removals are changes like
// any other: tombstones in the next Changes. It returns how many it removed;
// call it at every checkpoint, before Changes, and a backlog drains over a
// few. (Reads never return an expired value, removed or not.)
func (s *Store) Expire(now time.Time, limit int) (int, error) {
	if err := s.writable(); err != nil {
		return 0, err
	}
	n := 0
	err := s.tab.expire(now.UnixNano(), limit, func(exp int64, k []byte) {
		if _, ok := s.ov[string(k)]; ok {
			// Changed since the commit: the overlay decides. An
			// expired overlay value becomes a tombstone in Changes.
			return
		}
		s.insert(k, &entry{prev: exp})
		n++
	})
	s.expired += int64(n)
	if err != nil {
		return n, s.errorf("expiring: %w", err)
	}
	return n, nil
}

// Generation changes whenever the store's content changes other than
// through writes of its states: an Abort, a Restore. An operator that keeps
// decoded state in memory between writes drops it when the generation
// moved.
func (s *Store) Generation() uint64 { return s.gen }

// Stats returns the store's figures.
func (s *Store) Stats() Stats {
	ts := s.tab.stats()
	st := Stats{Keys: ts.keys, Dirty: len(s.ov), Bytes: ts.bytes, DiskBytes: ts.diskBytes, Expired: s.expired}
	for k, e := range s.ov {
		st.Bytes += int64(len(k)+len(e.val)) + 64
	}
	for _, t := range s.timers {
		st.Dirty += len(t.fresh)
		for mk := range t.fresh {
			st.Bytes += int64(len(mk)) + 64
		}
	}
	return st
}

// Close drops the uncommitted changes and releases the store. The committed
// state stays in the backend. Close is idempotent.
func (s *Store) Close() error {
	if s.closed {
		return nil
	}
	s.dropOverlay()
	s.tab.rollback()
	s.tab.release()
	s.closed = true
	return nil
}

// register adds a state kind to the store. check decodes a payload of the
// state, for Restore.
func (s *Store) register(name, kind string, ttl TTLConfig, check func([]byte) error) (*stateInfo, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if name == "" {
		return nil, s.errorf("%s state: empty name", kind)
	}
	if old, ok := s.states[name]; ok {
		return nil, s.errorf("state %q: already registered (as %s)", name, old.kind)
	}
	if err := ttl.validate(); err != nil {
		return nil, s.errorf("state %q: %w", name, err)
	}
	st := &stateInfo{
		name:   name,
		kind:   kind,
		prefix: statePrefix(name),
		ttl:    int64(ttl.TTL),
		onRead: ttl.TTL > 0 && ttl.Update == OnReadAndWrite,
		check:  check,
	}
	s.states[name] = st
	return st, nil
}

func (s *Store) errorf(format string, args ...any) error {
	return fmt.Errorf("state store %q task %d: "+format, append([]any{s.name, s.task}, args...)...)
}

func (s *Store) usable() error {
	if s.closed {
		return ErrClosed
	}
	return s.failed
}

func (s *Store) writable() error {
	if s.sealed {
		return ErrSealed
	}
	return s.usable()
}

func (s *Store) now() int64 { return s.clock.Now().UnixNano() }

// key encodes the changelog key of (st, key) without a map key in s.kbuf.
func (s *Store) key(st *stateInfo, key []byte) []byte {
	s.kbuf = appendGroup(s.kbuf[:0], st.prefix, key, subNone)
	return s.kbuf
}

// mapKey encodes the changelog key of (st, key, mk) in s.kbuf.
func (s *Store) mapKey(st *stateInfo, key []byte, mk string) []byte {
	s.kbuf = append(appendGroup(s.kbuf[:0], st.prefix, key, subMap), mk...)
	return s.kbuf
}

// lookup returns the live value (header + payload) stored under k, from the
// overlay or else the committed state; nil if there is none or its TTL has
// passed. prev is the key's committed expiry, as an entry records it. The
// value is read-only and valid until the next call on the store.
func (s *Store) lookup(k []byte) (val []byte, inOv bool, prev int64, err error) {
	if e, ok := s.ov[string(k)]; ok {
		if e.val == nil || !s.live(valueExp(e.val)) {
			return nil, true, e.prev, nil
		}
		return e.val, true, e.prev, nil
	}
	v, ok, err := s.tab.get(k)
	if err != nil {
		return nil, false, -1, s.errorf("reading key %q: %w", k, err)
	}
	if !ok {
		return nil, false, 0, nil
	}
	exp, _, err := parseValue(v)
	if err != nil {
		return nil, false, -1, s.errorf("stored value of key %q: %w", k, err)
	}
	if !s.live(exp) {
		return nil, false, exp, nil
	}
	return v, false, exp, nil
}

func (s *Store) live(exp int64) bool { return exp == 0 || exp > s.now() }

// touch refreshes the expiry of the live value val just read under k, for a
// state whose reads refresh it.
func (s *Store) touch(st *stateInfo, k, val []byte, inOv bool, prev int64) error {
	if !st.onRead {
		return nil
	}
	if err := s.writable(); err != nil {
		return err
	}
	exp := s.now() + st.ttl
	if inOv {
		e := s.ov[string(k)]
		e.val = withExp(e.val, exp) // the overlay owns e.val
		return nil
	}
	p := payloadOf(val)
	nv := appendHeader(make([]byte, 0, 1+expLen+len(p)), exp)
	s.insert(k, &entry{val: append(nv, p...), prev: prev})
	return nil
}

// header starts a new value of st in s.wbuf: its header, with a fresh
// expiry.
func (s *Store) header(st *stateInfo) []byte {
	return appendHeader(s.wbuf[:0], s.expiry(st))
}

// expiry is the expiry of a value of st written now; 0 for none.
func (s *Store) expiry(st *stateInfo) int64 {
	if st.ttl == 0 {
		return 0
	}
	return s.now() + st.ttl
}

// set writes val (header + payload) under k. prev is the key's committed
// expiry if the caller read it, else -1.
func (s *Store) set(st *stateInfo, k, val []byte, prev int64) {
	if e, ok := s.ov[string(k)]; ok {
		e.val = append(e.val[:0], val...) // the overlay owns e.val
		return
	}
	s.insert(k, &entry{val: append([]byte(nil), val...), prev: prevFor(st, prev)})
}

// del writes a tombstone under k.
func (s *Store) del(st *stateInfo, k []byte, prev int64) {
	if e, ok := s.ov[string(k)]; ok {
		e.val = nil
		return
	}
	s.insert(k, &entry{prev: prevFor(st, prev)})
}

// prevFor is what an entry records of a committed expiry the store did not
// read. A state without a TTL writes no expiry, so its old values have none
// (one written under an earlier TTL leaves an index entry the pebble backend
// drops when it comes to it).
func prevFor(st *stateInfo, prev int64) int64 {
	if prev >= 0 || st.ttl == 0 {
		return max(prev, 0)
	}
	return -1
}

// ovEntry is an overlay entry listed in its map group.
type ovEntry struct {
	key string
	e   *entry
}

// insert adds a key to the overlay.
func (s *Store) insert(k []byte, e *entry) {
	ks := string(k)
	s.ov[ks] = e
	if g := mapGroupLen(k); g > 0 {
		s.ovGroups[ks[:g]] = append(s.ovGroups[ks[:g]], ovEntry{ks, e})
	}
}

// decodeErr reports a stored value its codec cannot decode.
func (s *Store) decodeErr(st *stateInfo, key []byte, err error) error {
	return s.errorf("state %q key %q: decoding value: %w", st.name, key, err)
}

func (s *Store) encodeErr(st *stateInfo, key []byte, err error) error {
	return s.errorf("state %q key %q: encoding value: %w", st.name, key, err)
}
