package txsink

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// PartitionsOf returns the partitions of the topics that exist.
func PartitionsOf(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.TopicsSet, error) {
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, err
	}
	set := kadm.TopicsSet{}
	for t, d := range details {
		for p := range d.Partitions {
			set.Add(t, p)
		}
	}
	return set, nil
}

// HangingTxn is a transaction open on a partition that its transaction
// coordinator no longer considers live.
type HangingTxn struct {
	Topic       string
	Partition   int32
	ProducerID  int64
	Epoch       int16
	StartOffset int64
	OpenFor     time.Duration // since the producer's last write to the partition, as the broker reports it
	TxnID       string        // the transactional id, if the coordinator still knows the producer
	Reason      string
}

// Hanging returns the transactions left open on the given partitions: a
// partition has an open transaction (DescribeProducers) that the
// transaction coordinator does not have as ongoing for that producer and
// partition (ListTransactions, DescribeTransactions), and the producer last
// wrote to it longer than olderThan ago.
//
// Asking the coordinator matters: a producer's last write time comes from
// its record timestamps, which a pipeline copies from old input, so age
// alone would call a live transaction hanging, and aborting that loses data.
func Hanging(ctx context.Context, adm *kadm.Client, set kadm.TopicsSet, olderThan time.Duration) ([]HangingTxn, error) {
	described, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		return nil, err
	}
	var open []kadm.DescribedProducer
	pids := map[int64]bool{}
	described.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset >= 0 {
			open = append(open, p)
			pids[p.ProducerID] = true
		}
	})
	if len(open) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(pids))
	for id := range pids {
		ids = append(ids, id)
	}
	listed, err := adm.ListTransactions(ctx, ids, nil)
	if err != nil {
		return nil, fmt.Errorf("listing transactions: %w", err)
	}
	txnOf := map[int64]string{}
	listed.Each(func(l kadm.ListedTransaction) { txnOf[l.ProducerID] = l.TxnID })
	var coord kadm.DescribedTransactions
	if txnIDs := listed.TransactionalIDs(); len(txnIDs) > 0 {
		if coord, err = adm.DescribeTransactions(ctx, txnIDs...); err != nil {
			return nil, fmt.Errorf("describing transactions: %w", err)
		}
	}
	var out []HangingTxn
	now := time.Now()
	for _, p := range open {
		h := HangingTxn{Topic: p.Topic, Partition: p.Partition, ProducerID: p.ProducerID, Epoch: p.ProducerEpoch,
			StartOffset: p.CurrentTxnStartOffset, OpenFor: now.Sub(time.UnixMilli(p.LastTimestamp)), TxnID: txnOf[p.ProducerID]}
		if h.OpenFor <= olderThan {
			continue
		}
		d, known := coord[h.TxnID]
		switch {
		case h.TxnID == "" || !known || d.Err != nil:
			h.Reason = "no transaction coordinator knows this producer"
		case d.ProducerID != p.ProducerID:
			h.Reason = fmt.Sprintf("transactional id %s now belongs to producer %d", h.TxnID, d.ProducerID)
		case d.State == "Ongoing" || strings.HasPrefix(d.State, "Prepare"):
			if d.Topics.Lookup(p.Topic, p.Partition) || d.State != "Ongoing" {
				continue // live, or being completed: the coordinator will end it
			}
			h.Reason = "the coordinator's ongoing transaction does not include this partition"
		default:
			h.Reason = fmt.Sprintf("the coordinator has the transaction as %s", d.State)
		}
		out = append(out, h)
	}
	return out, nil
}
