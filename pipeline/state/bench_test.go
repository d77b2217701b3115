package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/internal/codec"
)

// benchBackend opens a fresh backend of kind name for a benchmark.
func benchBackend(b *testing.B, name string) Backend {
	if name == "memory" {
		return NewMemory()
	}
	p, err := OpenPebble(b.TempDir(), WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

var benchBackends = []string{"memory", "pebble"}

func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%07d", i)
	}
	return keys
}

// preload commits n keys of v through Restore, as a restored task would
// have them.
func preload(b *testing.B, s *Store, state string, keys [][]byte) {
	prefix := statePrefix(state)
	var recs []ChangelogRecord
	off := s.AppliedOffset() + 1
	for i, k := range keys {
		v := binary.AppendUvarint(appendHeader(nil, 0), uint64(i))
		recs = append(recs, ChangelogRecord{Key: appendGroup(nil, prefix, k, subNone), Value: v, Offset: off})
		off++
		if len(recs) == 50_000 || i == len(keys)-1 {
			if err := s.Restore(recs, off-1); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
}

// commitEvery runs a checkpoint every n writes, so the overlay stays the
// size a checkpoint interval gives it; its cost is part of the figures.
type commitEvery struct {
	s    *Store
	n, i int
	off  int64
}

func (c *commitEvery) wrote(b *testing.B) {
	c.i++
	if c.i%c.n != 0 {
		return
	}
	recs := c.s.Changes()
	c.off += int64(len(recs))
	if err := c.s.Commit(c.off); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkValue(b *testing.B) {
	for _, bn := range benchBackends {
		for _, size := range []struct {
			name string
			keys int
		}{{"hot100", 100}, {"keys1M", 1_000_000}} {
			b.Run(fmt.Sprintf("%s/%s", bn, size.name), func(b *testing.B) {
				s, err := Open(benchBackend(b, bn), "bench", 0, testFP, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				v, err := NewValue(s, "v", TTLConfig{}, WithCodec[uint64](u64Codec{}))
				if err != nil {
					b.Fatal(err)
				}
				keys := benchKeys(size.keys)
				preload(b, s, "v", keys)
				rng := rand.New(rand.NewPCG(1, 2))
				b.Run("Get", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, found, err := v.Get(keys[rng.IntN(len(keys))]); err != nil || !found {
							b.Fatal(found, err)
						}
					}
				})
				b.Run("Put", func(b *testing.B) {
					b.ReportAllocs()
					c := commitEvery{s: s, n: 10_000, off: s.AppliedOffset()}
					for b.Loop() {
						if err := v.Put(keys[rng.IntN(len(keys))], 7); err != nil {
							b.Fatal(err)
						}
						c.wrote(b)
					}
				})
			})
		}
	}
}

// countSumCodec is a binary codec for the count+sum accumulator.
type countSumCodec struct{}

func (countSumCodec) Append(dst []byte, v countSum) ([]byte, error) {
	dst = binary.AppendVarint(dst, v.Count)
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Sum)), nil
}

func (countSumCodec) Decode(src []byte) (countSum, error) {
	n, w := binary.Varint(src)
	if w <= 0 || len(src) != w+8 {
		return countSum{}, errors.New("bad count+sum")
	}
	return countSum{Count: n, Sum: math.Float64frombits(binary.LittleEndian.Uint64(src[w:]))}, nil
}

// BenchmarkAggregatingAdd is the aggregate hot path: count and sum of a
// value per key, a checkpoint every 10k adds.
func BenchmarkAggregatingAdd(b *testing.B) {
	for _, bn := range benchBackends {
		for _, codec := range []string{"json", "binary"} {
			for _, nkeys := range []int{1, 10_000} {
				b.Run(fmt.Sprintf("%s/%s/keys%d", bn, codec, nkeys), func(b *testing.B) {
					s, err := Open(benchBackend(b, bn), "bench", 0, testFP, nil)
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					var opts []Option[countSum]
					if codec == "binary" {
						opts = append(opts, WithCodec[countSum](countSumCodec{}))
					}
					a, err := NewAggregating(s, "a", avg{}, TTLConfig{}, opts...)
					if err != nil {
						b.Fatal(err)
					}
					keys := benchKeys(nkeys)
					c := commitEvery{s: s, n: 10_000, off: -1}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if err := a.Add(keys[i%nkeys], 1.5); err != nil {
							b.Fatal(err)
						}
						i++
						c.wrote(b)
					}
				})
			}
		}
	}
}

// BenchmarkCheckpoint times Changes and Commit of 10k dirty keys (out of
// 100k committed), the work a checkpoint adds per store.
func BenchmarkCheckpoint(b *testing.B) {
	const dirty = 10_000
	for _, bn := range benchBackends {
		b.Run(bn, func(b *testing.B) {
			s, err := Open(benchBackend(b, bn), "bench", 0, testFP, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			v, err := NewValue(s, "v", TTLConfig{}, WithCodec[uint64](u64Codec{}))
			if err != nil {
				b.Fatal(err)
			}
			keys := benchKeys(100_000)
			preload(b, s, "v", keys)
			off := s.AppliedOffset()
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for range dirty {
					if err := v.Put(keys[rng.IntN(len(keys))], uint64(i)); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				recs := s.Changes()
				off += int64(len(recs))
				if err := s.Commit(off); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/dirty, "ns/key")
		})
	}
}

// benchAcc is what BenchmarkRestore's records hold.
type benchAcc struct {
	Count int     `json:"count"`
	Sum   float64 `json:"sum"`
}

// BenchmarkRestore restores 100k changelog records (value states, 10k
// distinct keys rewritten 10 times, with a TTL) in fetch-sized batches of
// 10k into a fresh store: with the state registered, as the runtime
// restores (every value decoded by its codec, JSON here), and without
// (framing checked only).
func BenchmarkRestore(b *testing.B) {
	const n, batch = 100_000, 10_000
	var recs []ChangelogRecord
	prefix := statePrefix("v")
	for i := range n {
		key := appendGroup(nil, prefix, fmt.Appendf(nil, "key-%07d", i%10_000), subNone)
		val := fmt.Appendf(appendHeader(nil, 1_900_000_000_000_000_000+int64(i)), `{"count":%d,"sum":%d.5}`, i, i)
		recs = append(recs, ChangelogRecord{Key: key, Value: val, Offset: int64(i)})
	}
	for _, bench := range []struct {
		name       string
		backend    string
		registered bool
	}{{"memory/registered", "memory", true}, {"memory/unregistered", "memory", false}, {"pebble/registered", "pebble", true}, {"pebble/unregistered", "pebble", false}} {
		b.Run(bench.name, func(b *testing.B) {
			benchRestoreInto(b, recs, batch, func(s *Store) error {
				if !bench.registered {
					return nil
				}
				_, err := NewValue[benchAcc](s, "v", TTLConfig{TTL: time.Hour})
				return err
			}, func() Backend { return benchBackend(b, bench.backend) })
		})
	}
}

// BenchmarkRestoreAccumulators restores 200k changelog records as a keyed
// aggregate leaves them (one per key, binary accumulators of ~100 B) into
// a fresh memory store, in fetch-sized batches of 5k, with the state
// registered as the aggregate registers it: every value is checked by its
// codec.
func BenchmarkRestoreAccumulators(b *testing.B) {
	const n, batch = 200_000, 5_000
	prefix := statePrefix("acc")
	recs := make([]ChangelogRecord, n)
	pad := strings.Repeat("x", 70)
	for i := range recs {
		acc, err := codec.Acc{}.Append(appendHeader(nil, 0), map[string]any{"pad": pad, "n": i})
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = ChangelogRecord{Key: appendGroup(nil, prefix, fmt.Appendf(nil, "r%d", i), subNone), Value: acc, Offset: int64(i)}
	}
	benchRestoreInto(b, recs, batch, func(s *Store) error {
		_, err := NewValue[map[string]any](s, "acc", TTLConfig{}, WithCodec[map[string]any](codec.Acc{}))
		return err
	}, func() Backend { return NewMemory() })
}

// benchRestoreInto times restoring recs, in batches of batch, into a fresh
// store on a backend from backend, with the states register registers.
func benchRestoreInto(b *testing.B, recs []ChangelogRecord, batch int, register func(*Store) error, backend func() Backend) {
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s, err := Open(backend(), "bench", 0, testFP, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := register(s); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		s.ExpectRestore(int64(len(recs))) // as the engine does
		for off := 0; off < len(recs); off += batch {
			end := min(off+batch, len(recs))
			if err := s.Restore(recs[off:end], int64(end-1)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		_ = s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "records/s")
}
