package engine

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/lz4frame"
	"github.com/pipeline-run/pipeline/internal/testkit"
)

// clientTuned sets every client setting transactOpts maps to a value that
// is not its default, so that a setting dropped on the way shows.
const clientTuned = `
instance_id: replica-7
group: g-tuned
consumer: {start_from: latest, session_timeout: 17s, rebalance_timeout: 23s, fetch_max_bytes: 1234567, fetch_max_partition_bytes: 123456}
producer: {compression: zstd, linger: 7ms, batch_max_bytes: 345678, max_buffered_records: 4321, max_buffered_bytes: 98765432}
transactions: {id_prefix: txp, timeout: 77s}
sources: {in: {topics: [in, in2]}}
sinks: {out: {topic: out}}
`

// clientDefaults leaves every client setting at its default.
const clientDefaults = `
instance_id: replica-1
sources: {in: {topics: [in]}}
sinks: {out: {topic: out}}
`

// exactlyOnceClient builds, without connecting, the client transactOpts
// describes for body.
func exactlyOnceClient(t *testing.T, body string, seeds ...string) (*kgo.Client, *config.Config) {
	t.Helper()
	cfg := parseConfig(t, body)
	base, err := ClientOpts(cfg, seeds, nil)
	if err != nil {
		t.Fatal(err)
	}
	topics := make([]string, 0)
	for _, s := range cfg.Sources {
		topics = append(topics, s.Topics...)
	}
	cl, err := kgo.NewClient(transactOpts(cfg, base, topics, func(map[string][]int32) {})...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	// The options block rebalances on poll: a plain Close would wait for
	// an AllowRebalance that a failed test never calls.
	t.Cleanup(cl.CloseAllowingRebalance)
	return cl, cfg
}

func TestTransactOptsMapTheConfig(t *testing.T) {
	tunedCl, _ := exactlyOnceClient(t, clientTuned)
	defCl, _ := exactlyOnceClient(t, clientDefaults)
	mib := int64(1 << 20)
	tests := []struct {
		name        string
		opt         any
		values      bool // compare OptValues (id options: value and whether set)
		tuned, dflt any
	}{
		{"the client id names the pipeline", kgo.ClientID, true, []any{"pipeline-t", true}, []any{"pipeline-t", true}},
		{"the consumer group is group, by default the name", kgo.ConsumerGroup, false, "g-tuned", "t"},
		{"every source topic is consumed", kgo.ConsumeTopics, false, []string{"in", "in2"}, []string{"in"}},
		{"static membership uses instance_id", kgo.InstanceID, true, []any{"replica-7", true}, []any{"replica-1", true}},
		{"the session timeout is consumer.session_timeout", kgo.SessionTimeout, false, 17 * time.Second, 10 * time.Second},
		{"the rebalance timeout is consumer.rebalance_timeout", kgo.RebalanceTimeout, false, 23 * time.Second, 60 * time.Second},
		{"fetches read committed data only", kgo.FetchIsolationLevel, false, int8(1), int8(1)},
		{"fetch size is consumer.fetch_max_bytes", kgo.FetchMaxBytes, false, int32(1234567), int32(50 * mib)},
		{"a partition's share is consumer.fetch_max_partition_bytes", kgo.FetchMaxPartitionBytes, false, int32(123456), int32(mib)},
		{"rebalances wait for the poll loop", kgo.BlockRebalanceOnPoll, false, true, true},
		{"a new group starts where start_from says", kgo.ConsumeResetOffset, false, kgo.NewOffset().AtEnd(), kgo.NewOffset().AtStart()},
		{"the transactional id is <id_prefix>-<instance_id>", kgo.TransactionalID, true, []any{"txp-replica-7", true}, []any{"t-replica-1", true}},
		{"the transaction timeout is transactions.timeout", kgo.TransactionTimeout, false, 77 * time.Second, 60 * time.Second},
		{"linger is producer.linger", kgo.ProducerLinger, false, 7 * time.Millisecond, 50 * time.Millisecond},
		{"batches are at most producer.batch_max_bytes", kgo.ProducerBatchMaxBytes, false, int32(345678), int32(mib)},
		{"buffered records are at most producer.max_buffered_records", kgo.MaxBufferedRecords, false, int64(4321), int64(100000)},
		{"buffered bytes are at most producer.max_buffered_bytes", kgo.MaxBufferedBytes, false, int64(98765432), 256 * mib},
		// The default, lz4, is lz4frame's compressor: TestCompressionNames.
		{"compression is producer.compression, falling back to none", kgo.ProducerBatchCompression, false,
			[]kgo.CompressionCodec{kgo.ZstdCompression(), kgo.NoCompression()}, defaultCodecs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				which string
				cl    *kgo.Client
				want  any
			}{{"tuned", tunedCl, tc.tuned}, {"default", defCl, tc.dflt}} {
				var got any
				if tc.values {
					got = c.cl.OptValues(tc.opt)
				} else {
					got = c.cl.OptValue(tc.opt)
				}
				if !reflect.DeepEqual(got, c.want) {
					t.Errorf("%s config: got %#v, want %#v", c.which, got, c.want)
				}
			}
		})
	}
	t.Run("partitions are assigned by range so a task's inputs stay together", func(t *testing.T) {
		var names []string
		bs, _ := tunedCl.OptValue(kgo.Balancers).([]kgo.GroupBalancer)
		for _, b := range bs {
			names = append(names, b.ProtocolName())
		}
		if !reflect.DeepEqual(names, []string{"range"}) {
			t.Fatalf("balancers %v, want only range", names)
		}
	})
	t.Run("revoked and lost partitions are reported to the pipeline", func(t *testing.T) {
		cfg := parseConfig(t, clientDefaults)
		base, err := ClientOpts(cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []map[string][]int32
		cl, err := kgo.NewClient(transactOpts(cfg, base, []string{"in"}, func(m map[string][]int32) { got = append(got, m) })...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.CloseAllowingRebalance()
		for i, opt := range []any{kgo.OnPartitionsRevoked, kgo.OnPartitionsLost} {
			fn, ok := cl.OptValue(opt).(func(context.Context, *kgo.Client, map[string][]int32))
			if !ok || fn == nil {
				t.Fatalf("option %d: no callback", i)
			}
			fn(context.Background(), cl, map[string][]int32{"in": {int32(i)}})
		}
		if want := []map[string][]int32{{"in": {0}}, {"in": {1}}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("the pipeline was told %v, want %v", got, want)
		}
	})
}

// defaultCodecs is the client's codec list when none is set: with lz4 the
// producer compresses with lz4frame's compressor instead.
var defaultCodecs = []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.NoCompression()}

func TestCompressionNames(t *testing.T) {
	none := kgo.NoCompression()
	for name, want := range map[string][]kgo.CompressionCodec{
		"none":   {none},
		"gzip":   {kgo.GzipCompression(), none},
		"snappy": {kgo.SnappyCompression(), none},
		"lz4":    nil,
		"zstd":   {kgo.ZstdCompression(), none},
	} {
		t.Run(name, func(t *testing.T) {
			cl, _ := exactlyOnceClient(t, clientDefaults+"producer: {compression: "+name+"}\n")
			_, custom := cl.OptValue(kgo.WithCompressor).(*lz4frame.Compressor)
			if want == nil {
				if !custom {
					t.Fatalf("lz4 compresses with %T, want *lz4frame.Compressor", cl.OptValue(kgo.WithCompressor))
				}
				return
			}
			if got := cl.OptValue(kgo.ProducerBatchCompression); custom || !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v (lz4frame %v), want %v", got, custom, want)
			}
		})
	}
}

// TestOffsetFetchesRequireStableOffsets checks on the wire what the
// client's options cannot show (kgo reports RequireStableFetchOffsets as set
// whatever the options say, and now always sends it): offset fetches require
// stable offsets and fetches read committed data. Without stable offsets a
// consumer taking over a partition could read offsets a pending transaction
// is about to move, and replay or skip records.
func TestOffsetFetchesRequireStableOffsets(t *testing.T) {
	k := testkit.NewKafka(t)
	k.Topic("in", 1)
	var offsetFetches, unstable, fetches, uncommitted atomic.Int32
	k.Cluster.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		offsetFetches.Add(1)
		if !req.(*kmsg.OffsetFetchRequest).RequireStable {
			unstable.Add(1)
		}
		return nil, nil, false
	})
	k.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		fetches.Add(1)
		if req.(*kmsg.FetchRequest).IsolationLevel != 1 {
			uncommitted.Add(1)
		}
		return nil, nil, false
	})
	k.Input("in", 3, 1, nil)
	cl, _ := exactlyOnceClient(t, clientDefaults+"consumer: {session_timeout: 6s}\n", k.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for offsetFetches.Load() == 0 || fetches.Load() == 0 {
		// Short polls: the requests are what is checked, not records.
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		cl.PollFetches(pctx)
		pcancel()
		cl.AllowRebalance()
		if ctx.Err() != nil {
			t.Fatalf("%d offset fetches and %d fetches seen: %v", offsetFetches.Load(), fetches.Load(), ctx.Err())
		}
	}
	if n := unstable.Load(); n > 0 {
		t.Errorf("%d of %d offset fetches did not require stable offsets", n, offsetFetches.Load())
	}
	if n := uncommitted.Load(); n > 0 {
		t.Errorf("%d of %d fetches were not read_committed", n, fetches.Load())
	}
}
