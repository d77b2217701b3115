package bench

import (
	"bytes"
	"strconv"
)

// numKeys is how many distinct keys the input uses: records are keyed, so
// with several partitions the key decides the partition.
const numKeys = 10000

// Key returns the key of input record seq.
func Key(dst []byte, seq int64) []byte {
	dst = append(dst, 'k')
	return strconv.AppendInt(dst, seq%numKeys, 10)
}

// Value returns the value of input record seq, sent at ts (Unix
// microseconds): {"seq":N,"ts":T,"pad":"xx…"}, padded with x to size bytes
// (or left as short as it can be when size is smaller).
func Value(dst []byte, seq, ts int64, size int) []byte {
	start := len(dst)
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	dst = append(dst, `,"pad":"`...)
	for n := size - (len(dst) - start) - 2; n > 0; n-- {
		dst = append(dst, 'x')
	}
	return append(dst, `"}`...)
}

// intField returns the integer after `"name":` in a JSON object written by
// Value or re-encoded by the pipeline (whatever the field order). The pad
// holds only x, so the field name cannot appear inside a string.
func intField(v []byte, name string) (int64, bool) {
	var pat [16]byte
	p := append(append(append(pat[:0], '"'), name...), '"', ':')
	i := bytes.Index(v, p)
	if i < 0 {
		return 0, false
	}
	v = v[i+len(p):]
	for len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	end := 0
	if end < len(v) && v[end] == '-' {
		end++
	}
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(string(v[:end]), 10, 64)
	return n, err == nil
}

// Seq returns the sequence number of an input or output value.
func Seq(v []byte) (int64, bool) { return intField(v, "seq") }

// SentAt returns the send time (Unix microseconds) of an input or output
// value.
func SentAt(v []byte) (int64, bool) { return intField(v, "ts") }

// Expect is what an arm's output must hold, read back read_committed:
// every input seq below N that Keep accepts (all when Keep is nil), once,
// each with a value Valid accepts (any when Valid is nil).
type Expect struct {
	N     int64
	Keep  func(seq int64) bool
	Valid func(seq int64, value []byte) bool
}

// Count returns how many outputs e expects.
func (e Expect) Count() int64 {
	if e.Keep == nil {
		return e.N
	}
	var n int64
	for s := range e.N {
		if e.Keep(s) {
			n++
		}
	}
	return n
}

// filterKeeps is the filter-map arm's predicate, the same as its filter
// expression `value.seq % 10 != 3`.
func filterKeeps(seq int64) bool { return seq%10 != 3 }
