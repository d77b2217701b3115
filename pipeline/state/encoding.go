package state

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Changelog records, as produced by Changes and read back by Restore.
//
// Keys:
//
//	value:     0x01 | uvarint len(state) | state | uvarint len(key) | key | 0x00
//	map entry: 0x01 | uvarint len(state) | state | uvarint len(key) | key | 0x01 | map key
//	metadata:  0x00 | name   (only "fingerprint", whose value is the fingerprint)
//
// The length prefixes make keys round-trip and keep the entries of one map
// (state, key) contiguous in byte order behind a common prefix, the "group",
// which ends at the 0x01 flag; the pebble backend scans it.
//
// Values: a header byte, 0x10 (format 1) or 0x11 (format 1 with an expiry),
// then for 0x11 the expiry as 8 bytes big-endian Unix nanoseconds, then the
// payload: the codec's encoding, or for a list the elements each prefixed by
// a uvarint length. A nil value is a tombstone.
const (
	recMeta byte = 0x00
	recData byte = 0x01

	subNone byte = 0x00
	subMap  byte = 0x01

	valFormat byte = 0x10
	valHasExp byte = 0x01
	expLen         = 8
)

const metaFingerprint = "fingerprint"

var fingerprintKey = append([]byte{recMeta}, metaFingerprint...)

// statePrefix is the start of every key of one state.
func statePrefix(name string) []byte {
	b := []byte{recData}
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

func appendGroup(dst, prefix, key []byte, sub byte) []byte {
	dst = append(dst, prefix...)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return append(dst, sub)
}

// recordKey is a decoded changelog key.
type recordKey struct {
	meta   string // the metadata name; "" for a data record
	state  []byte // the state's name (read only: it is the key's bytes)
	key    []byte
	mapKey []byte
	group  int // for a map entry: the length of its group prefix; 0 otherwise
}

func parseKey(b []byte) (recordKey, error) {
	if len(b) == 0 {
		return recordKey{}, errors.New("empty key")
	}
	switch b[0] {
	case recMeta:
		if len(b) == 1 {
			return recordKey{}, errors.New("metadata key without a name")
		}
		return recordKey{meta: string(b[1:])}, nil
	case recData:
	default:
		return recordKey{}, fmt.Errorf("unknown key type 0x%02x", b[0])
	}
	state, rest, err := lenPrefixed(b[1:])
	if err != nil {
		return recordKey{}, fmt.Errorf("state name: %w", err)
	}
	key, rest, err := lenPrefixed(rest)
	if err != nil {
		return recordKey{}, fmt.Errorf("key: %w", err)
	}
	rk := recordKey{state: state, key: key}
	if len(rest) == 0 {
		return recordKey{}, errors.New("missing map-key flag")
	}
	switch rest[0] {
	case subNone:
		if len(rest) > 1 {
			return recordKey{}, fmt.Errorf("%d trailing bytes", len(rest)-1)
		}
	case subMap:
		rk.mapKey = rest[1:]
		rk.group = len(b) - len(rest) + 1
	default:
		return recordKey{}, fmt.Errorf("unknown map-key flag 0x%02x", rest[0])
	}
	return rk, nil
}

func lenPrefixed(b []byte) (v, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, nil, errors.New("bad length")
	}
	if n > uint64(len(b)-w) {
		return nil, nil, fmt.Errorf("length %d runs past the end", n)
	}
	end := w + int(n)
	return b[w:end], b[end:], nil
}

// mapGroupLen returns the length of the group prefix of a map entry's key,
// 0 for any other key.
func mapGroupLen(k []byte) int {
	// As parseKey reads it, without building the key: this runs for
	// every key a store writes or restores.
	if len(k) < 2 || k[0] != recData {
		return 0
	}
	i := 1
	for range 2 { // the state's name, then the key
		n, w := binary.Uvarint(k[i:])
		if w <= 0 || n > uint64(len(k)-i-w) {
			return 0
		}
		i += w + int(n)
	}
	if i >= len(k) || k[i] != subMap {
		return 0
	}
	return i + 1
}

func appendHeader(dst []byte, exp int64) []byte {
	if exp == 0 {
		return append(dst, valFormat)
	}
	dst = append(dst, valFormat|valHasExp)
	return binary.BigEndian.AppendUint64(dst, uint64(exp))
}

// parseValue checks a stored or changelog value and splits it.
func parseValue(v []byte) (exp int64, payload []byte, err error) {
	if len(v) == 0 {
		return 0, nil, errors.New("empty value")
	}
	switch v[0] {
	case valFormat:
		return 0, v[1:], nil
	case valFormat | valHasExp:
		if len(v) < 1+expLen {
			return 0, nil, errors.New("value too short for its expiry")
		}
		exp = int64(binary.BigEndian.Uint64(v[1:]))
		if exp <= 0 {
			return 0, nil, fmt.Errorf("bad expiry %d", exp)
		}
		return exp, v[1+expLen:], nil
	}
	return 0, nil, fmt.Errorf("unknown value format 0x%02x", v[0])
}

// valueExp and payloadOf read a value already checked by parseValue.
func valueExp(v []byte) int64 {
	if v[0]&valHasExp == 0 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v[1:]))
}

func payloadOf(v []byte) []byte {
	if v[0]&valHasExp == 0 {
		return v[1:]
	}
	return v[1+expLen:]
}

// withExp returns v with expiry exp: in place when v has room for it, so v
// must be owned by the caller.
func withExp(v []byte, exp int64) []byte {
	has := v[0]&valHasExp != 0
	switch {
	case has && exp != 0:
		binary.BigEndian.PutUint64(v[1:], uint64(exp))
		return v
	case !has && exp == 0:
		return v
	}
	p := payloadOf(v)
	nv := appendHeader(make([]byte, 0, 1+expLen+len(p)), exp)
	return append(nv, p...)
}

// namespace names one store (operator state of one task) in a backend.
func namespace(name string, task int32) string {
	b := binary.AppendUvarint(nil, uint64(len(name)))
	b = append(b, name...)
	return string(binary.BigEndian.AppendUint32(b, uint32(task)))
}
