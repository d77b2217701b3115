package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/wire"
)

// checkpoint is one hand-built checkpoint: the input range it claims, the
// outputs it really writes, and the count its progress record claims.
type planned struct {
	first, last int64
	write       int   // output records written in its transaction
	claim       int64 // output records its progress record says it wrote; -1: same as write
	abort       bool  // abort the transaction instead of committing it
}

type plan struct {
	inputs      int // input records, all in in/0
	checkpoints []planned
	groupAt     int64 // committed group offset; -1: the last checkpoint's end
	foreign     int   // output records written outside any transaction
	hanging     bool  // leave a transaction open that the coordinator has forgotten
}

func build(t *testing.T, h plan) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	k := testkit.NewKafka(t, kfake.SeedTopics(1, "in", "out", "progress"))
	c, addr := k.Cluster, k.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for i := range h.inputs {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("pipeline-i1"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	end := int64(0)
	for i, cp := range h.checkpoints {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range cp.write {
			if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: fmt.Appendf(nil, "%d-%d", i, j)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		claim := cp.claim
		if claim < 0 {
			claim = int64(cp.write)
		}
		p := wire.Progress{Version: 1, Pipeline: "p", Group: "g", Instance: "i1", Run: "r", Checkpoint: wire.CheckpointID(i + 1),
			Inputs:  []wire.ProgressInput{{Topic: "in", Partition: 0, First: cp.first, Last: cp.last}},
			Outputs: []wire.ProgressOutput{{Topic: "out", Partition: 0, Records: claim}}}
		b, _ := json.Marshal(p)
		if err := txn.ProduceSync(ctx, &kgo.Record{Topic: "progress", Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(!cp.abort)); err != nil {
			t.Fatal(err)
		}
		if !cp.abort {
			end = cp.last + 1
		}
	}
	for i := range h.foreign {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: fmt.Appendf(nil, "foreign-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	at := h.groupAt
	if at < 0 {
		at = end
	}
	adm := kadm.NewClient(cl)
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "in", Partition: 0, At: at, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g", os); err != nil {
		t.Fatal(err)
	}
	if h.hanging {
		stuck, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("stuck"), kgo.TransactionTimeout(10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stuck.Close)
		if err := stuck.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := stuck.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("stuck")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		// The coordinator forgets it: it answers that the transaction is over.
		c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			dreq := req.(*kmsg.DescribeTransactionsRequest)
			resp := dreq.ResponseKind().(*kmsg.DescribeTransactionsResponse)
			for _, id := range dreq.TransactionalIDs {
				st := kmsg.NewDescribeTransactionsResponseTransactionState()
				st.TransactionalID, st.State = id, "CompleteAbort"
				resp.TransactionStates = append(resp.TransactionStates, st)
			}
			return resp, nil, true
		})
	}
	return c, cl
}

var spec = Spec{Group: "g", Inputs: []string{"in"}, Outputs: []string{"out"}, Progress: "progress", TxnTimeout: time.Millisecond}

func TestAuditFindsEveryViolation(t *testing.T) {
	clean := []planned{{0, 4, 5, -1, false}, {5, 9, 5, -1, false}}
	tests := []struct {
		name string
		h    plan
		want []string // each a finding's prefix; none means a clean audit
	}{
		{name: "a clean history passes", h: plan{inputs: 10, checkpoints: clean, groupAt: -1}},
		{name: "an aborted checkpoint leaves no trace", h: plan{inputs: 10, groupAt: -1,
			checkpoints: []planned{{0, 4, 5, -1, false}, {5, 9, 7, -1, true}, {5, 9, 5, -1, false}}}},
		{name: "a duplicate output is caught", h: plan{inputs: 10, groupAt: -1,
			checkpoints: []planned{{0, 4, 6, 5, false}, {5, 9, 5, -1, false}}},
			want: []string{"output-count out/0: 11 records visible to read_committed, committed checkpoints wrote 10"}},
		{name: "a lost output is caught", h: plan{inputs: 10, groupAt: -1,
			checkpoints: []planned{{0, 4, 4, 5, false}, {5, 9, 5, -1, false}}},
			want: []string{"output-count out/0: 9 records visible to read_committed, committed checkpoints wrote 10"}},
		{name: "a record outside any committed checkpoint is caught", h: plan{inputs: 10, checkpoints: clean, groupAt: -1, foreign: 1},
			want: []string{"output-count out/0: 11 records visible"}},
		{name: "a gap in the consumed input is caught", h: plan{inputs: 10, groupAt: -1,
			checkpoints: []planned{{0, 4, 5, -1, false}, {7, 9, 3, -1, false}}},
			want: []string{"gap in/0@5: 2 records between checkpoint i1/r/1 (ends at 4) and i1/r/2 (starts at 7)"}},
		{name: "an overlap in the consumed input is caught", h: plan{inputs: 10, groupAt: -1,
			checkpoints: []planned{{0, 4, 5, -1, false}, {3, 9, 7, -1, false}}},
			want: []string{"overlap in/0@3: offsets 3..4 were consumed by checkpoint i1/r/1 and again by i1/r/2"}},
		{name: "committed offsets behind the last checkpoint are caught", h: plan{inputs: 10, checkpoints: clean, groupAt: 8},
			want: []string{"offsets in/0: the group's committed offset is 8; the last checkpoint ended at 10"}},
		{name: "committed offsets ahead of the last checkpoint are caught", h: plan{inputs: 12, checkpoints: clean, groupAt: 12},
			want: []string{"offsets in/0: the group's committed offset is 12; the last checkpoint ended at 10"}},
		{name: "a hanging transaction is caught", h: plan{inputs: 10, checkpoints: clean, groupAt: -1, hanging: true},
			want: []string{"hanging out/0@12: producer"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, cl := build(t, tc.h)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := Run(ctx, cl, spec)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.String())
			}
			if len(tc.want) == 0 && !r.OK() {
				t.Fatalf("findings on a clean history:\n%s", strings.Join(got, "\n"))
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, w)
				}
				if !found {
					t.Errorf("no finding %q; got:\n%s", w, strings.Join(got, "\n"))
				}
			}
			if len(tc.want) > 0 && len(got) > len(tc.want) {
				t.Errorf("more findings than expected:\n%s", strings.Join(got, "\n"))
			}
		})
	}
}
