package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble is the on-disk backend: one pebble database per process, holding
// every store of every task under its own key prefix, so a restart replays
// only the changelog tail after each store's applied offset.
//
// Its memory use is bounded by the block cache and the memtables, whatever
// the number of keys. By default commits are not synced to disk (see
// WithSync): the changelog is the truth, and a store's applied offset is
// written in the same batch as its data, so whatever a crash loses locally
// is replayed from the changelog.
//
// Keys, under a store's namespace ns (see namespace):
//
//	ns 'd' changelog key               → changelog value
//	ns 'x' expiry (8 bytes) changelog key → empty: the expiry index
//	ns 'm' "applied" | "fingerprint"   → metadata
type Pebble struct {
	db *pebble.DB
	wo *pebble.WriteOptions

	mu     sync.Mutex
	inUse  map[string]bool
	closed bool
}

// PebbleOption configures OpenPebble.
type PebbleOption func(*pebbleConfig)

type pebbleConfig struct {
	cache    int64
	memtable int64
	sync     bool
	log      *slog.Logger
	fs       vfs.FS // tests: a file system that can crash
}

// Defaults of the pebble backend's memory: the block cache, and the size of
// a memtable (pebble keeps up to two full ones, and smaller while it grows
// them).
const (
	DefaultCacheSize    = 64 << 20
	DefaultMemTableSize = 16 << 20
)

// WithCacheSize sets the block cache size in bytes (default 64 MiB).
func WithCacheSize(n int64) PebbleOption { return func(c *pebbleConfig) { c.cache = n } }

// WithMemTableSize sets the size of pebble's memtables in bytes (default 16
// MiB). A store's commit or restore batch larger than about half of it
// bypasses the memtable and is flushed to disk on its own, which is slower.
func WithMemTableSize(n int64) PebbleOption { return func(c *pebbleConfig) { c.memtable = n } }

// WithSync syncs every store's commit to disk. Without it, a commit stays
// in pebble's write-ahead log buffer (up to a 32 KiB block) until the
// block fills or something syncs: a process killed before then loses it.
// Persist, which the runtime calls once per checkpoint after every store
// committed, syncs all of them together; with it, a crash loses at most the
// commits of the checkpoint that was settling. Whatever is lost is read
// again from the changelog.
func WithSync(on bool) PebbleOption { return func(c *pebbleConfig) { c.sync = on } }

// WithLogger sets where pebble logs (default slog.Default()); its routine
// messages go at debug level.
func WithLogger(l *slog.Logger) PebbleOption { return func(c *pebbleConfig) { c.log = l } }

// OpenPebble opens (or creates) the pebble database in dir. Only one
// process may have it open.
func OpenPebble(dir string, opts ...PebbleOption) (*Pebble, error) {
	cfg := pebbleConfig{cache: DefaultCacheSize, memtable: DefaultMemTableSize, log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.cache <= 0 || cfg.memtable < 1<<20 {
		return nil, fmt.Errorf("pebble state backend: cache size %d must be positive and memtable size %d at least 1 MiB", cfg.cache, cfg.memtable)
	}
	po := &pebble.Options{
		CacheSize:          cfg.cache,
		MemTableSize:       uint64(cfg.memtable),
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{cfg.log.With("component", "pebble", "dir", dir)},
		FS:                 cfg.fs,
	}
	// Bloom filters spare point reads of absent keys (a first write to a
	// key, TTL index maintenance) a disk read per level.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("opening pebble state backend in %s: %w", dir, err)
	}
	wo := pebble.NoSync
	if cfg.sync {
		wo = pebble.Sync
	}
	return &Pebble{db: db, wo: wo, inUse: map[string]bool{}}, nil
}

// Persist makes every commit so far durable, with one sync of the
// write-ahead log: cheaper than syncing each store's commit (WithSync).
func (p *Pebble) Persist() error {
	if p.wo == pebble.Sync {
		return nil
	}
	return p.db.LogData(nil, pebble.Sync)
}

// Close closes the database. It fails while a store is open.
func (p *Pebble) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if len(p.inUse) > 0 {
		return fmt.Errorf("closing pebble state backend: %d stores still open: %w", len(p.inUse), ErrInUse)
	}
	p.closed = true
	return p.db.Close()
}

func (p *Pebble) claim(ns string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.inUse[ns] {
		return ErrInUse
	}
	p.inUse[ns] = true
	return nil
}

func (p *Pebble) unclaim(ns string) {
	p.mu.Lock()
	delete(p.inUse, ns)
	p.mu.Unlock()
}

func (p *Pebble) open(name string, task int32) (table, error) {
	ns := namespace(name, task)
	if err := p.claim(ns); err != nil {
		return nil, err
	}
	t := &pebbleTable{
		p:       p,
		ns:      ns,
		dpre:    []byte(ns + "d"),
		xpre:    []byte(ns + "x"),
		xend:    []byte(ns + "y"),
		applied: -1,
	}
	v, err := t.meta(metaApplied)
	if err == nil && v != nil {
		if len(v) != 8 {
			err = fmt.Errorf("applied offset: %d bytes", len(v))
		} else {
			t.applied = int64(binary.BigEndian.Uint64(v))
		}
	}
	if err == nil {
		v, err = t.meta(metaFingerprint)
		t.fp = string(v)
	}
	if err != nil {
		p.unclaim(ns)
		return nil, fmt.Errorf("reading state metadata: %w", err)
	}
	return t, nil
}

func (p *Pebble) drop(name string, task int32) error {
	ns := namespace(name, task)
	if err := p.claim(ns); err != nil {
		return err
	}
	defer p.unclaim(ns)
	// Every key of the namespace is ns followed by 'd', 'x' or 'm'.
	return p.db.DeleteRange([]byte(ns), []byte(ns+"\xff"), pebble.Sync)
}

const metaApplied = "applied"

type pebbleTable struct {
	p                *Pebble
	ns               string
	dpre, xpre, xend []byte
	applied          int64
	fp               string

	// What expire handed out since the last commit: it resumes after
	// cursor (an index key), and stale index entries (whose data changed
	// since) are deleted by the next commit.
	cursor []byte
	stale  [][]byte

	kbuf, xbuf, vbuf []byte
	work             int64
}

func (t *pebbleTable) meta(name string) ([]byte, error) {
	v, c, err := t.p.db.Get([]byte(t.ns + "m" + name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return bytes.Clone(v), nil
}

func (t *pebbleTable) get(k []byte) ([]byte, bool, error) {
	t.kbuf = append(append(t.kbuf[:0], t.dpre...), k...)
	v, c, err := t.p.db.Get(t.kbuf)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	t.vbuf = append(t.vbuf[:0], v...)
	return t.vbuf, true, c.Close()
}

func (t *pebbleTable) scanGroup(group []byte, fn func(k, v []byte) error) error {
	lower := append(bytes.Clone(t.dpre), group...)
	// A group ends in subMap: its successor bounds it.
	upper := bytes.Clone(lower)
	upper[len(upper)-1]++
	it, err := t.p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key()[len(t.dpre):], v)
		}
		if err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

func (t *pebbleTable) expire(now int64, limit int, fn func(exp int64, k []byte)) error {
	lower := t.xpre
	if t.cursor != nil {
		lower = append(bytes.Clone(t.cursor), 0) // the first key after the cursor
	}
	it, err := t.p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: t.xend})
	if err != nil {
		return err
	}
	for ok := it.First(); ok && limit > 0; ok = it.Next() {
		limit--
		t.work++
		ik := it.Key()
		if len(ik) < len(t.xpre)+expLen {
			_ = it.Close()
			return fmt.Errorf("expiry index key %q too short", ik)
		}
		exp := int64(binary.BigEndian.Uint64(ik[len(t.xpre):]))
		if exp > now {
			break
		}
		k := ik[len(t.xpre)+expLen:]
		v, found, err := t.get(k)
		if err != nil {
			_ = it.Close()
			return err
		}
		if found {
			vexp, _, err := parseValue(v)
			if err != nil {
				_ = it.Close()
				return fmt.Errorf("key %q: %w", k, err)
			}
			found = vexp == exp
		}
		if found {
			fn(exp, k)
		} else {
			// The entry was deleted or rewritten without its old
			// expiry being looked up (a state whose TTL was
			// removed): drop the stale index entry.
			t.stale = append(t.stale, bytes.Clone(ik))
		}
		t.cursor = append(t.cursor[:0], ik...)
	}
	return it.Close()
}

func (t *pebbleTable) xkey(exp int64, k []byte) []byte {
	t.xbuf = append(t.xbuf[:0], t.xpre...)
	t.xbuf = binary.BigEndian.AppendUint64(t.xbuf, uint64(exp))
	t.xbuf = append(t.xbuf, k...)
	return t.xbuf
}

func (t *pebbleTable) commit(ws []write, applied int64, fp string) error {
	b := t.p.db.NewBatch()
	defer b.Close()
	// Batch operations copy their arguments, so the scratch buffers may be
	// reused at once.
	for _, w := range ws {
		prev := w.prev
		if prev < 0 {
			v, ok, err := t.get(w.key)
			if err != nil {
				return err
			}
			prev = 0
			if ok {
				if prev, _, err = parseValue(v); err != nil {
					return fmt.Errorf("key %q: %w", w.key, err)
				}
			}
		}
		if prev > 0 {
			if err := b.Delete(t.xkey(prev, w.key), nil); err != nil {
				return err
			}
		}
		t.kbuf = append(append(t.kbuf[:0], t.dpre...), w.key...)
		if w.val == nil {
			if err := b.Delete(t.kbuf, nil); err != nil {
				return err
			}
			continue
		}
		if err := b.Set(t.kbuf, w.val, nil); err != nil {
			return err
		}
		if exp := valueExp(w.val); exp > 0 {
			if err := b.Set(t.xkey(exp, w.key), nil, nil); err != nil {
				return err
			}
		}
	}
	for _, k := range t.stale {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	if applied != t.applied {
		if err := b.Set([]byte(t.ns+"m"+metaApplied), binary.BigEndian.AppendUint64(nil, uint64(applied)), nil); err != nil {
			return err
		}
	}
	if fp != "" && fp != t.fp {
		if err := b.Set([]byte(t.ns+"m"+metaFingerprint), []byte(fp), nil); err != nil {
			return err
		}
	}
	if !b.Empty() {
		if err := b.Commit(t.p.wo); err != nil {
			return err
		}
	}
	t.applied = applied
	if fp != "" {
		t.fp = fp
	}
	t.rollback()
	return nil
}

func (t *pebbleTable) rollback() {
	t.cursor = nil
	t.stale = nil
}

func (t *pebbleTable) appliedOffset() int64 { return t.applied }
func (t *pebbleTable) fingerprint() string  { return t.fp }
func (t *pebbleTable) expireWork() int64    { return t.work }
func (t *pebbleTable) release()             { t.p.unclaim(t.ns) }

func (t *pebbleTable) stats() tableStats {
	st := tableStats{keys: -1}
	if n, err := t.p.db.EstimateDiskUsage([]byte(t.ns), []byte(t.ns+"\xff")); err == nil {
		st.diskBytes = int64(n)
	}
	return st
}

// pebbleLogger sends pebble's log to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf is called by pebble on an unrecoverable condition (corruption of
// its own files) and must not return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic("pebble: " + msg)
}

// withFS runs pebble on fs (tests crash it).
func withFS(fs vfs.FS) PebbleOption { return func(c *pebbleConfig) { c.fs = fs } }
