package state

import (
	"slices"
	"strings"
	"unsafe"
)

// kindMap names the map kind: the only one whose records are map entries.
const kindMap = "map"

// Map is a state holding a map from string keys to values per key. Each map
// entry is stored, changelogged and expired on its own, so a large map is
// never rewritten whole.
type Map[T any] struct {
	s     *Store
	st    *stateInfo
	codec Codec[T]
}

// NewMap registers a map state named name in s.
func NewMap[T any](s *Store, name string, ttl TTLConfig, opts ...Option[T]) (*Map[T], error) {
	c := codecOf(opts)
	st, err := s.register(name, kindMap, ttl, decodes(c))
	if err != nil {
		return nil, err
	}
	return &Map[T]{s: s, st: st, codec: c}, nil
}

// Get returns the value of mk in key's map and whether there is one.
func (m *Map[T]) Get(key []byte, mk string) (T, bool, error) {
	var zero T
	s := m.s
	k := s.mapKey(m.st, key, mk)
	val, inOv, prev, err := s.lookup(k)
	if err != nil || val == nil {
		return zero, false, err
	}
	x, err := m.codec.Decode(payloadOf(val))
	if err != nil {
		return zero, false, s.decodeErr(m.st, key, err)
	}
	return x, true, s.touch(m.st, k, val, inOv, prev)
}

// Put sets mk to x in key's map.
func (m *Map[T]) Put(key []byte, mk string, x T) error {
	s := m.s
	if err := s.writable(); err != nil {
		return err
	}
	buf, err := m.codec.Append(s.header(m.st), x)
	if err != nil {
		return s.encodeErr(m.st, key, err)
	}
	s.set(m.st, s.mapKey(m.st, key, mk), buf, -1)
	s.wbuf = buf[:0]
	return nil
}

// Remove deletes mk from key's map.
func (m *Map[T]) Remove(key []byte, mk string) error {
	s := m.s
	if err := s.writable(); err != nil {
		return err
	}
	s.del(m.st, s.mapKey(m.st, key, mk), -1)
	return nil
}

// MapEntry is an entry of a Map.
type MapEntry[T any] struct {
	Key   string
	Value T
}

// Entries returns the entries of key's map sorted by map key, so that
// operators iterating them act in the same order on every replay. With
// OnReadAndWrite, it refreshes the expiry of every entry it returns.
func (m *Map[T]) Entries(key []byte) ([]MapEntry[T], error) {
	return m.EntriesExcept(key, nil)
}

// EntriesExcept is Entries without the entries whose map key skip (if not
// nil) says to leave out: those are neither decoded nor refreshed. skip
// must not keep the string it is given.
func (m *Map[T]) EntriesExcept(key []byte, skip func(mk string) bool) ([]MapEntry[T], error) {
	s := m.s
	group := appendGroup(s.gbuf[:0], m.st.prefix, key, subMap)
	s.gbuf = group
	var out []MapEntry[T]
	for _, oe := range s.ovGroups[string(group)] {
		ks, e := oe.key, oe.e
		if e.val == nil || !s.live(valueExp(e.val)) || (skip != nil && skip(ks[len(group):])) {
			continue
		}
		x, err := m.codec.Decode(payloadOf(e.val))
		if err != nil {
			return nil, s.decodeErr(m.st, key, err)
		}
		out = append(out, MapEntry[T]{ks[len(group):], x})
		if m.st.onRead {
			if err := s.touch(m.st, []byte(ks), e.val, true, e.prev); err != nil {
				return nil, err
			}
		}
	}
	err := s.tab.scanGroup(group, func(k, v []byte) error {
		if _, ok := s.ov[string(k)]; ok {
			return nil
		}
		exp, p, err := parseValue(v)
		if err != nil {
			return s.errorf("stored value of key %q: %w", k, err)
		}
		if !s.live(exp) {
			return nil
		}
		if skip != nil && skip(view(k[len(group):])) {
			return nil
		}
		x, err := m.codec.Decode(p)
		if err != nil {
			return s.decodeErr(m.st, key, err)
		}
		out = append(out, MapEntry[T]{string(k[len(group):]), x})
		return s.touch(m.st, k, v, false, exp)
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b MapEntry[T]) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Clear removes key's whole map.
func (m *Map[T]) Clear(key []byte) error {
	s := m.s
	if err := s.writable(); err != nil {
		return err
	}
	group := appendGroup(s.gbuf[:0], m.st.prefix, key, subMap)
	s.gbuf = group
	for _, oe := range s.ovGroups[string(group)] {
		oe.e.val = nil
	}
	var keys [][]byte
	var prevs []int64
	err := s.tab.scanGroup(group, func(k, v []byte) error {
		if _, ok := s.ov[string(k)]; ok {
			return nil
		}
		exp, _, err := parseValue(v)
		if err != nil {
			return s.errorf("stored value of key %q: %w", k, err)
		}
		keys = append(keys, []byte(string(k)))
		prevs = append(prevs, exp)
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		s.del(m.st, k, prevs[i])
	}
	return nil
}

// view is b as a string without a copy, for a call that does not keep it.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
