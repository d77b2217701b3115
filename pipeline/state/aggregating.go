package state

// ReduceFunc folds v into acc.
type ReduceFunc[T any] func(acc, v T) (T, error)

// Reducing is a state holding per key the reduction of the values added:
// the first value, then fn(acc, v) for each next one.
type Reducing[T any] struct {
	s     *Store
	st    *stateInfo
	codec Codec[T]
	fn    ReduceFunc[T]
}

// NewReducing registers a reducing state named name in s.
func NewReducing[T any](s *Store, name string, fn ReduceFunc[T], ttl TTLConfig, opts ...Option[T]) (*Reducing[T], error) {
	if fn == nil {
		return nil, s.errorf("reducing state %q: nil function", name)
	}
	c := codecOf(opts)
	st, err := s.register(name, "reducing", ttl, decodes(c))
	if err != nil {
		return nil, err
	}
	return &Reducing[T]{s: s, st: st, codec: c, fn: fn}, nil
}

// Get returns key's reduction and whether it has one.
func (r *Reducing[T]) Get(key []byte) (T, bool, error) {
	return get(r.s, r.st, r.codec, key)
}

// Add folds x into key's reduction. An error from the function leaves the
// state unchanged.
func (r *Reducing[T]) Add(key []byte, x T) error {
	s := r.s
	if err := s.writable(); err != nil {
		return err
	}
	k := s.key(r.st, key)
	val, _, prev, err := s.lookup(k)
	if err != nil {
		return err
	}
	acc := x
	if val != nil {
		old, err := r.codec.Decode(payloadOf(val))
		if err != nil {
			return s.decodeErr(r.st, key, err)
		}
		if acc, err = r.fn(old, x); err != nil {
			return err
		}
	}
	return put(s, r.st, r.codec, key, k, acc, prev)
}

// Clear removes key's reduction.
func (r *Reducing[T]) Clear(key []byte) error { return clearKey(r.s, r.st, key) }

// Aggregator folds inputs of type In into an accumulator of type Acc, the
// stored state, and computes a result of type Out from it.
type Aggregator[In, Acc, Out any] interface {
	// Init returns the accumulator of a key with no input yet.
	Init() Acc
	// Add folds in into acc.
	Add(acc Acc, in In) (Acc, error)
	// Result computes the result of acc.
	Result(acc Acc) (Out, error)
}

// Aggregating is a state holding per key an accumulator of the inputs
// added, read through its result.
type Aggregating[In, Acc, Out any] struct {
	s     *Store
	st    *stateInfo
	codec Codec[Acc]
	agg   Aggregator[In, Acc, Out]
}

// NewAggregating registers an aggregating state named name in s. Options
// apply to the accumulator.
func NewAggregating[In, Acc, Out any](s *Store, name string, agg Aggregator[In, Acc, Out], ttl TTLConfig, opts ...Option[Acc]) (*Aggregating[In, Acc, Out], error) {
	if agg == nil {
		return nil, s.errorf("aggregating state %q: nil aggregator", name)
	}
	c := codecOf(opts)
	st, err := s.register(name, "aggregating", ttl, decodes(c))
	if err != nil {
		return nil, err
	}
	return &Aggregating[In, Acc, Out]{s: s, st: st, codec: c, agg: agg}, nil
}

// Get returns the result of key's accumulator and whether it has one.
func (a *Aggregating[In, Acc, Out]) Get(key []byte) (Out, bool, error) {
	var zero Out
	acc, ok, err := get(a.s, a.st, a.codec, key)
	if err != nil || !ok {
		return zero, false, err
	}
	out, err := a.agg.Result(acc)
	if err != nil {
		return zero, false, err
	}
	return out, true, nil
}

// Add folds in into key's accumulator. An error from the aggregator leaves
// the state unchanged.
func (a *Aggregating[In, Acc, Out]) Add(key []byte, in In) error {
	s := a.s
	if err := s.writable(); err != nil {
		return err
	}
	k := s.key(a.st, key)
	val, _, prev, err := s.lookup(k)
	if err != nil {
		return err
	}
	var acc Acc
	if val != nil {
		if acc, err = a.codec.Decode(payloadOf(val)); err != nil {
			return s.decodeErr(a.st, key, err)
		}
	} else {
		acc = a.agg.Init()
	}
	if acc, err = a.agg.Add(acc, in); err != nil {
		return err
	}
	return put(s, a.st, a.codec, key, k, acc, prev)
}

// Clear removes key's accumulator.
func (a *Aggregating[In, Acc, Out]) Clear(key []byte) error { return clearKey(a.s, a.st, key) }

// get reads and decodes the value of key in a state with one value per key.
func get[T any](s *Store, st *stateInfo, c Codec[T], key []byte) (T, bool, error) {
	var zero T
	k := s.key(st, key)
	val, inOv, prev, err := s.lookup(k)
	if err != nil || val == nil {
		return zero, false, err
	}
	x, err := c.Decode(payloadOf(val))
	if err != nil {
		return zero, false, s.decodeErr(st, key, err)
	}
	return x, true, s.touch(st, k, val, inOv, prev)
}

// put encodes x as the value of k (the encoding of key) after a read.
func put[T any](s *Store, st *stateInfo, c Codec[T], key, k []byte, x T, prev int64) error {
	buf, err := c.Append(s.header(st), x)
	if err != nil {
		return s.encodeErr(st, key, err)
	}
	s.set(st, k, buf, prev)
	s.wbuf = buf[:0]
	return nil
}

func clearKey(s *Store, st *stateInfo, key []byte) error {
	if err := s.writable(); err != nil {
		return err
	}
	s.del(st, s.key(st, key), -1)
	return nil
}
