package offsets

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// countingDecompressor counts the batches it decodes.
type countingDecompressor struct {
	kgo.Decompressor
	calls atomic.Int64
}

func (d *countingDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	d.calls.Add(1)
	return d.Decompressor.Decompress(src, codec)
}

const pad = "."

// show renders records as the test compares them: a data record as its
// value without its padding, a transaction marker as COMMIT or ABORT.
func show(t *testing.T, recs []*kgo.Record) string {
	t.Helper()
	var out []string
	for _, r := range recs {
		if !r.Attrs.IsControl() {
			out = append(out, strings.TrimRight(string(r.Value), pad))
			continue
		}
		var key kmsg.ControlRecordKey
		if err := key.ReadFrom(r.Key); err != nil {
			t.Fatalf("control record %d/%d: %v", r.Partition, r.Offset, err)
		}
		out = append(out, strings.ToUpper(key.Type.String()))
	}
	return strings.Join(out, " ")
}

// TestReadOptions writes, to partition 0, a committed transaction (a b), an
// aborted one (c) and another committed one (d); to partition 1 a plain
// record (e) and then a transaction left open (f). Each option must change
// what Read returns, and the zero options must read as ReadToEnd does.
func TestReadOptions(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	producer := func(id string) *kgo.Client {
		opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("t"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.Lz4Compression())}
		if id != "" {
			opts = append(opts, kgo.TransactionalID(id), kgo.TransactionTimeout(time.Minute))
		}
		p, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	produce := func(p *kgo.Client, part int32, values ...string) {
		t.Helper()
		for _, v := range values {
			// Padded, so that lz4 shrinks the batch and it is sent compressed.
			value := v + strings.Repeat(pad, 200)
			if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	begin := func(p *kgo.Client, part int32, values ...string) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(p, part, values...)
	}
	txn := func(p *kgo.Client, end kgo.TransactionEndTry, part int32, values ...string) {
		t.Helper()
		begin(p, part, values...)
		if err := p.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	tx := producer("read-test")
	defer tx.Close()
	txn(tx, kgo.TryCommit, 0, "a", "b")
	txn(tx, kgo.TryAbort, 0, "c")
	txn(tx, kgo.TryCommit, 0, "d")
	plain := producer("")
	defer plain.Close()
	produce(plain, 1, "e")
	open := producer("read-test-open")
	defer open.Close()
	begin(open, 1, "f") // never ended

	byPartition := func(recs []*kgo.Record) map[int32]string {
		parts := map[int32][]*kgo.Record{}
		for _, r := range recs {
			parts[r.Partition] = append(parts[r.Partition], r)
		}
		out := map[int32]string{}
		for p, rs := range parts {
			if !slices.IsSortedFunc(rs, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) }) {
				t.Fatalf("partition %d out of offset order", p)
			}
			out[p] = show(t, rs)
		}
		return out
	}
	dec := &countingDecompressor{Decompressor: kgo.DefaultDecompressor()}
	for _, tc := range []struct {
		name string
		opts ReadOptions
		want map[int32]string
	}{
		{"the zero options read committed data to the last stable offset", ReadOptions{}, map[int32]string{0: "a b d", 1: "e"}},
		{"read_uncommitted reads aborted and open records too", ReadOptions{Isolation: ReadUncommitted}, map[int32]string{0: "a b c d", 1: "e f"}},
		{"markers are kept in offset order", ReadOptions{Isolation: ReadUncommitted, KeepControl: true}, map[int32]string{0: "a b COMMIT c ABORT d COMMIT", 1: "e f"}},
		{"To stops each partition it names and skips the others", ReadOptions{Isolation: ReadUncommitted, KeepControl: true, To: map[int32]int64{0: 4}}, map[int32]string{0: "a b COMMIT c"}},
		{"a given decompressor decodes the batches", ReadOptions{Decompressor: dec}, map[int32]string{0: "a b d", 1: "e"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := Read(ctx, cl, "t", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := byPartition(recs); !maps.Equal(got, tc.want) {
				t.Fatalf("read %v, want %v", got, tc.want)
			}
			// ReadEach hands over the same records, a partition's
			// fetch at a time.
			var each []*kgo.Record
			err = ReadEach(ctx, cl, "t", tc.opts, func(p int32, rs []*kgo.Record) error {
				for _, r := range rs {
					if r.Partition != p {
						t.Errorf("ReadEach handed a record of partition %d as partition %d's", r.Partition, p)
					}
				}
				each = append(each, rs...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := byPartition(each); !maps.Equal(got, tc.want) {
				t.Fatalf("ReadEach read %v, want %v", got, tc.want)
			}
		})
	}
	if dec.calls.Load() == 0 {
		t.Fatal("the decompressor given in ReadOptions was never called: the batches were not compressed, or it was ignored")
	}

	// An error of ReadEach's fn ends the read and is returned.
	stop := errors.New("enough")
	calls := 0
	if err := ReadEach(ctx, cl, "t", ReadOptions{}, func(int32, []*kgo.Record) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("ReadEach with a failing fn: %v after %d calls, want %v after 1", err, calls, stop)
	}

	// The markers carry the producer id of the records they end.
	recs, err := Read(ctx, cl, "t", ReadOptions{Isolation: ReadUncommitted, KeepControl: true, To: map[int32]int64{0: 7}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if !r.Attrs.IsTransactional() || r.ProducerID != recs[0].ProducerID {
			t.Errorf("%d/%d (%s): transactional %v, producer id %d, want one transactional producer %d",
				r.Partition, r.Offset, show(t, []*kgo.Record{r}), r.Attrs.IsTransactional(), r.ProducerID, recs[0].ProducerID)
		}
	}

	for _, committed := range []bool{true, false} {
		old, err := ReadToEnd(ctx, cl, "t", committed)
		if err != nil {
			t.Fatal(err)
		}
		opts := ReadOptions{}
		if !committed {
			opts.Isolation = ReadUncommitted
		}
		recs, err := Read(ctx, cl, "t", opts)
		if err != nil {
			t.Fatal(err)
		}
		if show(t, old) != show(t, recs) {
			t.Errorf("committed %v: ReadToEnd read %q, Read %q", committed, show(t, old), show(t, recs))
		}
	}
}

// TestReadPartitionWaitsForANewTopic reads a partition of a topic the broker
// does not know yet, as a restore may right after its changelog was created:
// the listing's UNKNOWN_TOPIC_OR_PARTITION must be waited out, and the read
// must return the records once the topic exists. Read, which the audit
// uses, must instead fail at once on a topic that does not exist.
func TestReadPartitionWaitsForANewTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("late"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := Read(ctx, cl, "late", ReadOptions{}); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("Read of a topic that does not exist: %v, want UNKNOWN_TOPIC_OR_PARTITION in the chain", err)
	}

	created := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "late", 1, 1
		req.Topics = append(req.Topics, rt)
		if _, err := req.RequestWith(ctx, cl); err != nil {
			created <- err
			return
		}
		created <- cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	}()
	var got []string
	err = ReadPartition(ctx, cl, "late", 0, 0, func(recs []*kgo.Record, _ Progress) error {
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		return nil
	})
	if cerr := <-created; cerr != nil {
		t.Fatalf("creating the topic: %v", cerr)
	}
	if err != nil {
		t.Fatalf("ReadPartition of a topic created while it listed offsets: %v", err)
	}
	// The read may have listed the end before the record was produced;
	// what it returns must be a prefix of the partition.
	if len(got) > 1 || (len(got) == 1 && got[0] != "v") {
		t.Fatalf("read %q", got)
	}
	t.Logf("read %d records after waiting for the topic", len(got))
}

// TestReadReportsProgress checks that OnProgress hears of a read from its
// start, with the offsets to read, to its end, never going back.
func TestReadReportsProgress(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range 30 {
		// One batch per record, so the read takes several fetches' worth.
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var seen []Progress
	recs, err := Read(ctx, cl, "t", ReadOptions{OnProgress: func(p Progress) { seen = append(seen, p) }})
	if err != nil || len(recs) != 30 {
		t.Fatalf("Read: %d records, %v", len(recs), err)
	}
	if len(seen) < 2 || seen[0] != (Progress{Done: 0, Total: 30}) || seen[len(seen)-1] != (Progress{Done: 30, Total: 30}) {
		t.Fatalf("progress %v: want it to start at 0 of 30 and end at 30 of 30", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].Done < seen[i-1].Done {
			t.Fatalf("progress went back: %v", seen)
		}
	}
}

// TestReadPartitionHandsOverSmallFetches checks that ReadPartition hands a
// long partition over a small fetch at a time, in order: its caller (a
// restore) works on one while the next is read, and holds little.
func TestReadPartitionHandsOverSmallFetches(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "long"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("long"), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // the limit is on the bytes fetched
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const batches, perBatch, size = 40, 100, 1000 // 4 MB in batches of 100 KB
	for b := range batches {
		recs := make([]*kgo.Record, perBatch)
		for i := range recs {
			v := []byte(strings.Repeat(pad, size))
			copy(v, strconv.Itoa(b*perBatch+i))
			recs[i] = &kgo.Record{Value: v}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var calls, next int
	err = ReadPartition(ctx, cl, "long", 0, 0, func(recs []*kgo.Record, _ Progress) error {
		calls++
		var n int
		for _, r := range recs {
			if got := strings.TrimRight(string(r.Value), pad); got != strconv.Itoa(next) {
				t.Fatalf("record at offset %d reads %q, want %d", r.Offset, got, next)
			}
			next++
			n += len(r.Value)
		}
		if n > streamPartitionBytes {
			t.Errorf("fetch %d handed over %d bytes of values, more than the %d a fetch may hold", calls, n, streamPartitionBytes)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != batches*perBatch {
		t.Fatalf("read %d records, want %d", next, batches*perBatch)
	}
	if min := batches * perBatch * size / streamPartitionBytes; calls < min {
		t.Fatalf("handed over in %d fetches, want at least %d", calls, min)
	}
	t.Logf("%d records in %d fetches", next, calls)
}
