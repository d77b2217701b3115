package state

// Value is a state holding one value per key.
type Value[T any] struct {
	s     *Store
	st    *stateInfo
	codec Codec[T]
}

// NewValue registers a value state named name in s.
func NewValue[T any](s *Store, name string, ttl TTLConfig, opts ...Option[T]) (*Value[T], error) {
	c := codecOf(opts)
	st, err := s.register(name, "value", ttl, decodes(c))
	if err != nil {
		return nil, err
	}
	return &Value[T]{s: s, st: st, codec: c}, nil
}

// Get returns key's value and whether it has one.
func (v *Value[T]) Get(key []byte) (T, bool, error) { return get(v.s, v.st, v.codec, key) }

// Put sets key's value.
func (v *Value[T]) Put(key []byte, x T) error {
	if err := v.s.writable(); err != nil {
		return err
	}
	return put(v.s, v.st, v.codec, key, v.s.key(v.st, key), x, -1)
}

// Delete removes key's value.
func (v *Value[T]) Delete(key []byte) error { return clearKey(v.s, v.st, key) }
