package fetchpool

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPoolHandsBackWhatFits: a slice handed back serves a later request
// it can hold, and only such a request; what it cannot hold is made.
func TestPoolHandsBackWhatFits(t *testing.T) {
	var p Pool
	rs := p.GetRecords(100)
	if cap(rs) < 100 || len(rs) != 0 {
		t.Fatalf("GetRecords(100): len %d cap %d", len(rs), cap(rs))
	}
	p.PutRecords(rs[:cap(rs)])
	if got := p.GetRecords(200); cap(got) < 200 || &got[:1][0] == &rs[:1][0] {
		t.Fatalf("GetRecords(200) gave a slice of cap %d, or the one of 100 back", cap(got))
	}
	if got := p.GetRecords(90); &got[:1][0] != &rs[:1][0] {
		t.Fatal("GetRecords(90) did not reuse the slice handed back")
	}

	for _, n := range []int{1, 4096, 4097, 100 << 10, 4 << 20} {
		b := p.Bytes(n)
		if len(b) != n {
			t.Fatalf("Bytes(%d): len %d", n, len(b))
		}
		p.PutDecompressBytes(b)
		if again := p.Bytes(n); &again[:1][0] != &b[:1][0] {
			t.Fatalf("Bytes(%d) did not reuse the slice handed back", n)
		}
	}
	// Larger than the largest class: made, and not kept.
	big := p.Bytes(5 << 20)
	p.PutDecompressBytes(big)
	if again := p.Bytes(5 << 20); &again[:1][0] == &big[:1][0] {
		t.Fatal("a slice over the largest class was kept")
	}
	// A slice of any capacity goes to the largest class it holds.
	odd := make([]byte, 0, 6000)
	p.PutDecompressBytes(odd)
	if got := p.Bytes(4096); &got[:1][0] != &odd[:1][0] {
		t.Fatal("a 6000 B slice does not serve a 4096 B request")
	}
	p.PutDecompressBytes(odd)
	if got := p.Bytes(5000); &got[:1][0] == &odd[:1][0] || cap(got) < 5000 {
		t.Fatal("a 5000 B request got the 6000 B slice from the 4 KiB class, or too small a slice")
	}
	if r, b := p.Returned(); r != 1 || b != 8 {
		t.Fatalf("Returned() = %d, %d; want 1, 8", r, b)
	}
	var keep Pool
	for range poolKeep + 5 {
		keep.PutRecords(make([]kgo.Record, 0, 10))
	}
	if len(keep.recs) != poolKeep {
		t.Fatalf("the pool keeps %d record slices, want at most %d", len(keep.recs), poolKeep)
	}
}
