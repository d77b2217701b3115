package state

import "encoding/json"

// Codec encodes a state's Go values. The default is JSON.
//
// Decode must not keep src: it is a buffer the store reuses. Both methods
// are called from the store's goroutine only.
type Codec[T any] interface {
	// Append appends the encoding of v to dst.
	Append(dst []byte, v T) ([]byte, error)
	// Decode decodes a value encoded by Append.
	Decode(src []byte) (T, error)
}

// JSON is the default codec: encoding/json. With T = any, numbers come back
// as float64 and objects as map[string]any.
type JSON[T any] struct{}

// Append implements Codec.
func (JSON[T]) Append(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// Decode implements Codec.
func (JSON[T]) Decode(src []byte) (T, error) {
	var v T
	err := json.Unmarshal(src, &v)
	return v, err
}

// Option configures a state kind holding values of type T.
type Option[T any] func(*options[T])

type options[T any] struct {
	codec Codec[T]
}

// WithCodec encodes the state's values with c instead of JSON.
func WithCodec[T any](c Codec[T]) Option[T] { return func(o *options[T]) { o.codec = c } }

// Checker is a Codec that can tell whether src decodes without decoding
// it: Check fails exactly where Decode would. A restore checks every
// changelog record it reads with it.
type Checker interface {
	Check(src []byte) error
}

// decodes returns a payload check for Restore: the payload decodes with c.
func decodes[T any](c Codec[T]) func([]byte) error {
	if ch, ok := c.(Checker); ok {
		return ch.Check
	}
	return func(p []byte) error {
		_, err := c.Decode(p)
		return err
	}
}

func codecOf[T any](opts []Option[T]) Codec[T] {
	o := options[T]{codec: JSON[T]{}}
	for _, f := range opts {
		f(&o)
	}
	return o.codec
}
