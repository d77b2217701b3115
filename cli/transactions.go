package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pipeline-run/pipeline/txsink"
)

func (e *env) transactions(ctx context.Context, args []string) error {
	return e.group(ctx, "transactions", args, []subcommand{
		{"hanging", "transactions hanging -c FILE [--abort] [--older-than D] [--format text|json]",
			"Lists (and with --abort, aborts) the transactions left open on the partitions of the\npipeline's sink and dead-letter topics.", e.hanging},
	})
}

func (e *env) hanging(ctx context.Context, fs *command, args []string) error {
	path := fs.String("c", "", "the pipeline's YAML `file`")
	abort := fs.Bool("abort", false, "abort the hanging transactions found")
	older := fs.duration("older-than", 0, "report transactions open longer than this `duration` (default: transactions.timeout)")
	format := fs.formatFlag()
	if err := fs.parse(args); err != nil {
		return err
	}
	asJSON, err := jsonFormat(*format)
	if err != nil {
		return err
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	adm, err := e.adminFor(cfg)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	topics := g.OutputTopics()
	set, err := txsink.PartitionsOf(ctx, adm, topics...)
	if err != nil {
		return err
	}
	if *older == 0 {
		*older = cfg.Transactions.Timeout
	}
	hanging, err := txsink.Hanging(ctx, adm, set, *older)
	if err != nil {
		return err
	}
	if asJSON {
		return e.hangingJSON(ctx, adm, topics, *older, hanging, *abort)
	}
	if len(hanging) == 0 {
		fmt.Fprintf(e.stdout, "no transaction open longer than %s on %s\n", *older, strings.Join(topics, ", "))
		return nil
	}
	for _, h := range hanging {
		fmt.Fprintf(e.stdout, "%s/%d: producer %d epoch %d open since offset %d, last write %s ago: %s\n", h.Topic, h.Partition, h.ProducerID, h.Epoch, h.StartOffset, h.OpenFor.Round(time.Second), h.Reason)
	}
	if !*abort {
		return nil
	}
	var errs []error
	for _, h := range hanging {
		if err := abortTxn(ctx, adm, h); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(e.stdout, "aborted %s/%d producer %d\n", h.Topic, h.Partition, h.ProducerID)
	}
	return errors.Join(errs...)
}

// abortTxn writes an abort marker for the hanging transaction h.
func abortTxn(ctx context.Context, adm *kadm.Client, h txsink.HangingTxn) error {
	resp, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{
		ProducerID: h.ProducerID, ProducerEpoch: h.Epoch, Commit: false,
		CoordinatorEpoch: -1, Topics: kadm.TopicsSet{h.Topic: {h.Partition: {}}},
	})
	if err == nil {
		resp.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
			if p.Err != nil && err == nil {
				err = p.Err
			}
		})
	}
	if err != nil {
		return fmt.Errorf("aborting %s/%d producer %d: %w", h.Topic, h.Partition, h.ProducerID, err)
	}
	return nil
}

// hangingTxn is one hanging transaction in transactions hanging's JSON.
type hangingTxn struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	ProducerID    int64  `json:"producer_id"`
	ProducerEpoch int16  `json:"producer_epoch"`
	StartOffset   int64  `json:"start_offset"`
	OpenForMs     int64  `json:"open_for_ms"` // since the producer's last write
	Reason        string `json:"reason"`
	Aborted       bool   `json:"aborted"`     // with --abort, and the abort succeeded
	AbortError    string `json:"abort_error"` // with --abort, why it failed
}

func (e *env) hangingJSON(ctx context.Context, adm *kadm.Client, topics []string, older time.Duration, hanging []txsink.HangingTxn, abort bool) error {
	out := struct {
		OlderThanMs int64        `json:"older_than_ms"`
		Topics      []string     `json:"topics"`
		Hanging     []hangingTxn `json:"hanging"`
	}{older.Milliseconds(), topics, []hangingTxn{}}
	var errs []error
	for _, h := range hanging {
		j := hangingTxn{Topic: h.Topic, Partition: h.Partition, ProducerID: h.ProducerID, ProducerEpoch: h.Epoch,
			StartOffset: h.StartOffset, OpenForMs: h.OpenFor.Milliseconds(), Reason: h.Reason}
		if abort {
			if err := abortTxn(ctx, adm, h); err != nil {
				errs = append(errs, err)
				j.AbortError = err.Error()
			} else {
				j.Aborted = true
			}
		}
		out.Hanging = append(out.Hanging, j)
	}
	if err := e.writeJSON(out); err != nil {
		return err
	}
	return errors.Join(errs...)
}
