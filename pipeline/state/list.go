package state

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// List is a state holding a list of values per key, optionally bounded:
// adding to a full list drops its oldest element. The list has one expiry,
// refreshed by every write.
type List[T any] struct {
	s      *Store
	st     *stateInfo
	codec  Codec[T]
	maxLen int
}

// NewList registers a list state named name in s. maxLen bounds the lists'
// length; 0 leaves them unbounded.
func NewList[T any](s *Store, name string, ttl TTLConfig, maxLen int, opts ...Option[T]) (*List[T], error) {
	if maxLen < 0 {
		return nil, s.errorf("list state %q: negative maximum length %d", name, maxLen)
	}
	c := codecOf(opts)
	check := func(p []byte) error {
		for len(p) > 0 {
			var elem []byte
			var err error
			if elem, p, err = lenPrefixed(p); err != nil {
				return fmt.Errorf("list element: %w", err)
			}
			if _, err := c.Decode(elem); err != nil {
				return err
			}
		}
		return nil
	}
	st, err := s.register(name, "list", ttl, check)
	if err != nil {
		return nil, err
	}
	return &List[T]{s: s, st: st, codec: c, maxLen: maxLen}, nil
}

// Get returns key's list, nil if it has none.
func (l *List[T]) Get(key []byte) ([]T, error) {
	s := l.s
	k := s.key(l.st, key)
	val, inOv, prev, err := s.lookup(k)
	if err != nil || val == nil {
		return nil, err
	}
	var out []T
	p := payloadOf(val)
	for len(p) > 0 {
		var elem []byte
		if elem, p, err = lenPrefixed(p); err != nil {
			return nil, s.decodeErr(l.st, key, err)
		}
		x, err := l.codec.Decode(elem)
		if err != nil {
			return nil, s.decodeErr(l.st, key, err)
		}
		out = append(out, x)
	}
	return out, s.touch(l.st, k, val, inOv, prev)
}

// Add appends x to key's list.
func (l *List[T]) Add(key []byte, x T) error {
	s := l.s
	if err := s.writable(); err != nil {
		return err
	}
	elem, err := l.codec.Append(s.ebuf[:0], x)
	if err != nil {
		return s.encodeErr(l.st, key, err)
	}
	s.ebuf = elem[:0]
	k := s.key(l.st, key)
	val, inOv, prev, err := s.lookup(k)
	if err != nil {
		return err
	}
	if inOv && val != nil {
		// Append in place: the overlay owns its values.
		e := s.ov[string(k)]
		e.val = withExp(e.val, s.expiry(l.st))
		e.val = appendElem(e.val, elem)
		e.val, err = l.trim(e.val)
		return err
	}
	buf := s.header(l.st)
	if val != nil {
		buf = append(buf, payloadOf(val)...)
	}
	buf, err = l.trim(appendElem(buf, elem))
	if err == nil {
		s.set(l.st, k, buf, prev)
	}
	s.wbuf = buf[:0]
	return err
}

// Update replaces key's list with xs; an empty xs clears it.
func (l *List[T]) Update(key []byte, xs []T) error {
	s := l.s
	if err := s.writable(); err != nil {
		return err
	}
	if len(xs) == 0 {
		s.del(l.st, s.key(l.st, key), -1)
		return nil
	}
	if l.maxLen > 0 && len(xs) > l.maxLen {
		xs = xs[len(xs)-l.maxLen:]
	}
	buf := s.header(l.st)
	for _, x := range xs {
		elem, err := l.codec.Append(s.ebuf[:0], x)
		if err != nil {
			return s.encodeErr(l.st, key, err)
		}
		s.ebuf = elem[:0]
		buf = appendElem(buf, elem)
	}
	s.set(l.st, s.key(l.st, key), buf, -1)
	s.wbuf = buf[:0]
	return nil
}

// Clear removes key's list.
func (l *List[T]) Clear(key []byte) error {
	s := l.s
	if err := s.writable(); err != nil {
		return err
	}
	s.del(l.st, s.key(l.st, key), -1)
	return nil
}

func appendElem(dst, elem []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(elem)))
	return append(dst, elem...)
}

// trim drops the oldest elements of v (header + payload) beyond maxLen.
func (l *List[T]) trim(v []byte) ([]byte, error) {
	if l.maxLen == 0 {
		return v, nil
	}
	h := len(v) - len(payloadOf(v))
	n := 0
	for p := v[h:]; len(p) > 0; n++ {
		var err error
		if _, p, err = lenPrefixed(p); err != nil {
			return v, errors.New("corrupt list")
		}
	}
	p := v[h:]
	for ; n > l.maxLen; n-- {
		_, p, _ = lenPrefixed(p)
	}
	return append(v[:h], p...), nil
}
