package state

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"time"
)

// TimeDomain says which clock a timer follows.
type TimeDomain uint8

const (
	// EventTime timers fire when the watermark of the operator's input
	// reaches their time.
	EventTime TimeDomain = iota
	// ProcessingTime timers fire when the wall clock reaches their time,
	// at the next checkpoint barrier or batch after it.
	ProcessingTime
)

func (d TimeDomain) String() string {
	if d == ProcessingTime {
		return "processing_time"
	}
	return "event_time"
}

// Timer is one timer: a key, a time and a domain. A key has at most one
// timer per time and domain in one Timers state.
type Timer struct {
	// State is the name of the Timers state the timer is in.
	State  string
	Key    []byte
	Time   time.Time
	Domain TimeDomain
}

// kindTimers names the timers kind. Its records are map entries of one
// group, so a restore brings every timer back.
const kindTimers = "timers"

// timerGroup is the key every timer of a state is a map entry of.
var timerGroup = []byte{0}

// Timers is a state holding timers, ordered by time. Timers are keyed state
// like any other: each one is a changelog record, so they commit and abort
// with the checkpoint, are restored with the store and move with the task.
// A timer is removed when it fires (or is deleted).
//
// The engine fires them: event-time timers once the watermark reaches their
// time, processing-time ones once the wall clock does. It calls the
// operator's OnTimer (pipeline.TimerHandler) for each, in time order, and
// whatever the operator emits then is part of the open checkpoint.
type Timers struct {
	s    *Store
	m    *Map[struct{}]
	name string

	// The in-memory index of the live timers (committed and in the
	// overlay), by domain. It is rebuilt from the store when the store's
	// content changed under it (an abort, a restore).
	gen   uint64
	built bool
	index [2]timerHeap
	live  map[string]struct{} // map keys of live timers
	// fresh holds the map keys of the live timers set since the store's
	// last Changes, which the store has not seen: they are written to it
	// by Changes (writeFresh), so that a timer set and fired between two
	// checkpoints, as most are, costs no store write and removal.
	fresh map[string]struct{}
}

// NewTimers registers a timers state named name in s.
func NewTimers(s *Store, name string) (*Timers, error) {
	m, err := NewMap[struct{}](s, name, TTLConfig{}, WithCodec[struct{}](emptyCodec{}))
	if err != nil {
		return nil, err
	}
	m.st.kind = kindTimers
	t := &Timers{s: s, m: m, name: name}
	s.timers = append(s.timers, t)
	return t, nil
}

// Set registers a timer for key at t in domain d; setting one that is
// already there does nothing.
func (t *Timers) Set(key []byte, at time.Time, d TimeDomain) error {
	if err := t.sync(); err != nil {
		return err
	}
	mk := timerKey(d, at.UnixMilli(), key)
	if _, ok := t.live[mk]; ok {
		return nil
	}
	if err := t.s.writable(); err != nil {
		return err
	}
	t.fresh[mk] = struct{}{}
	t.live[mk] = struct{}{}
	heap.Push(&t.index[d], timerEntry{at: at.UnixMilli(), mk: mk})
	return nil
}

// Delete removes the timer for key at t in domain d, if there is one.
func (t *Timers) Delete(key []byte, at time.Time, d TimeDomain) error {
	if err := t.sync(); err != nil {
		return err
	}
	mk := timerKey(d, at.UnixMilli(), key)
	if _, ok := t.live[mk]; !ok {
		return nil
	}
	if err := t.remove(mk); err != nil {
		return err
	}
	// The heap entry is skipped when it comes up.
	delete(t.live, mk)
	return nil
}

// Next returns the time of the earliest timer of domain d, in Unix
// milliseconds, and whether there is one.
func (t *Timers) Next(d TimeDomain) (int64, bool, error) {
	if err := t.sync(); err != nil {
		return 0, false, err
	}
	h := &t.index[d]
	for h.Len() > 0 {
		top := (*h)[0]
		if _, ok := t.live[top.mk]; ok {
			return top.at, true, nil
		}
		heap.Pop(h)
	}
	return 0, false, nil
}

// Pop removes and returns the earliest timer of domain d if its time is
// at or before upTo (Unix milliseconds).
func (t *Timers) Pop(d TimeDomain, upTo int64) (Timer, bool, error) {
	at, ok, err := t.Next(d)
	if err != nil || !ok || at > upTo {
		return Timer{}, false, err
	}
	if err := t.remove(t.index[d][0].mk); err != nil {
		return Timer{}, false, err
	}
	e := heap.Pop(&t.index[d]).(timerEntry)
	delete(t.live, e.mk)
	return Timer{State: t.name, Key: []byte(e.mk[9:]), Time: time.UnixMilli(e.at), Domain: d}, true, nil
}

// remove removes the live timer mk from the store, unless the store has
// not seen it yet.
func (t *Timers) remove(mk string) error {
	if err := t.s.writable(); err != nil {
		return err
	}
	if _, ok := t.fresh[mk]; ok {
		delete(t.fresh, mk)
		return nil
	}
	return t.m.Remove(timerGroup, mk)
}

// writeFresh writes the timers the store has not seen to it. The store is
// writable.
func (t *Timers) writeFresh() {
	s, st := t.s, t.m.st
	for mk := range t.fresh {
		s.set(st, s.mapKey(st, timerGroup, mk), s.header(st), -1)
	}
	clear(t.fresh)
}

// Len returns how many timers are live.
func (t *Timers) Len() (int, error) {
	if err := t.sync(); err != nil {
		return 0, err
	}
	return len(t.live), nil
}

// sync rebuilds the index if the store's content changed under it.
func (t *Timers) sync() error {
	if t.built && t.gen == t.s.gen {
		return nil
	}
	entries, err := t.m.Entries(timerGroup)
	if err != nil {
		return err
	}
	t.live = make(map[string]struct{}, len(entries))
	t.fresh = map[string]struct{}{}
	t.index = [2]timerHeap{}
	for _, e := range entries {
		d, at, _, err := parseTimerKey(e.Key)
		if err != nil {
			return t.s.errorf("timers %q: %w", t.name, err)
		}
		t.live[e.Key] = struct{}{}
		t.index[d] = append(t.index[d], timerEntry{at: at, mk: e.Key})
	}
	heap.Init(&t.index[0])
	heap.Init(&t.index[1])
	t.built, t.gen = true, t.s.gen
	return nil
}

// timerKey is a timer's map key: the domain, the time (order-preserving:
// the sign bit flipped) and the key, so that map keys sort by time.
func timerKey(d TimeDomain, at int64, key []byte) string {
	b := make([]byte, 9, 9+len(key))
	b[0] = byte(d)
	binary.BigEndian.PutUint64(b[1:], uint64(at)^(1<<63))
	return string(append(b, key...))
}

func parseTimerKey(mk string) (TimeDomain, int64, []byte, error) {
	if len(mk) < 9 || mk[0] > byte(ProcessingTime) {
		return 0, 0, nil, fmt.Errorf("malformed timer %q", mk)
	}
	at := int64(binary.BigEndian.Uint64([]byte(mk[1:9])) ^ (1 << 63))
	return TimeDomain(mk[0]), at, []byte(mk[9:]), nil
}

type timerEntry struct {
	at int64
	mk string
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].mk < h[j].mk
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// emptyCodec encodes the nothing a timer holds.
type emptyCodec struct{}

func (emptyCodec) Append(dst []byte, _ struct{}) ([]byte, error) { return dst, nil }
func (emptyCodec) Decode(src []byte) (struct{}, error) {
	if len(src) != 0 {
		return struct{}{}, fmt.Errorf("a timer holds no value, found %d bytes", len(src))
	}
	return struct{}{}, nil
}
