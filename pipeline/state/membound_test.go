package state

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestPebbleMemoryIsBoundedWhateverTheKeyCount writes five times more
// state than the Go heap is allowed to hold at the end, through a pebble
// store with a 1 MiB cache and 1 MiB memtables, then reads a spread of it
// back. The block cache and the memtables stay within their sizes and the
// heap does not grow with the key count: the data is on disk.
func TestPebbleMemoryIsBoundedWhateverTheKeyCount(t *testing.T) {
	if testing.Short() {
		t.Skip("writes about 130 MB to disk")
	}
	const (
		keys     = 100_000
		valueLen = 1000
		mib      = 1 << 20
	)
	b, err := OpenPebble(t.TempDir(), WithCacheSize(mib), WithMemTableSize(mib),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := Open(b, "big", 0, testFP, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := NewValue[[]byte](s, "v", TTLConfig{})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, valueLen+7) // random, so that compression cannot shrink it
	rnd := rand.New(rand.NewPCG(1, 2))
	off := int64(-1)
	for i := range keys {
		for j := 0; j < valueLen; j += 8 {
			binary.LittleEndian.PutUint64(val[j:], rnd.Uint64())
		}
		copy(val, fmt.Appendf(nil, "%08d", i))
		if err := v.Put(fmt.Appendf(nil, "key-%08d", i), val[:valueLen]); err != nil {
			t.Fatal(err)
		}
		if i%1_000 == 999 {
			off += int64(len(s.Changes()))
			if err := s.Commit(off); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < keys; i += 97 {
		got, ok, err := v.Get(fmt.Appendf(nil, "key-%08d", i))
		if err != nil || !ok || string(got[:8]) != fmt.Sprintf("%08d", i) {
			t.Fatalf("key-%08d = %q, %v, %v", i, got, ok, err)
		}
	}

	m := b.db.Metrics()
	if m.BlockCache.Size > mib {
		t.Errorf("block cache holds %d bytes, more than its %d", m.BlockCache.Size, mib)
	}
	// The mutable memtable and those waiting to flush, which pebble
	// bounds (MemTableStopWritesThreshold, 2 by default) by stopping
	// writes.
	if limit := uint64(4 * mib); m.MemTable.Size > limit {
		t.Errorf("memtables hold %d bytes, more than %d", m.MemTable.Size, limit)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	data := uint64(keys * (valueLen + 12))
	if ms.HeapInuse > data/5 {
		t.Errorf("heap in use %d MiB after writing %d MiB of state: memory grows with the keys", ms.HeapInuse/mib, data/mib)
	}
	if st := s.Stats(); st.DiskBytes < int64(data/4) {
		t.Errorf("only %d bytes on disk for %d of state: the data is not where it should be", st.DiskBytes, data)
	}
	t.Logf("%d keys, %d MiB of state: heap in use %d MiB, block cache %d KiB, memtables %d KiB, disk %d MiB",
		keys, data/mib, ms.HeapInuse/mib, m.BlockCache.Size>>10, m.MemTable.Size>>10, s.Stats().DiskBytes/mib)
}
