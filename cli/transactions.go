package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/twmb/franz-go/pkg/kadm"
)

func (e *env) transactions(ctx context.Context, args []string) error {
	return e.group(ctx, "transactions", args, []subcommand{
		{"hanging", "transactions hanging -c FILE [--abort] [--older-than D]",
			"Lists (and with --abort, aborts) the transactions left open on the partitions of the\npipeline's sink and dead-letter topics.", e.hanging},
	})
}

func (e *env) hanging(ctx context.Context, fs *command, args []string) error {
	path := fs.String("c", "", "the pipeline's YAML `file`")
	abort := fs.Bool("abort", false, "abort the hanging transactions found")
	older := fs.Duration("older-than", 0, "report transactions open longer than this (default: transactions.timeout)")
	if err := fs.parse(args); err != nil {
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
	set, err := pipeline.PartitionsOf(ctx, adm, topics...)
	if err != nil {
		return err
	}
	if *older == 0 {
		*older = cfg.Transactions.Timeout
	}
	hanging, err := pipeline.Hanging(ctx, adm, set, *older)
	if err != nil {
		return err
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
			errs = append(errs, fmt.Errorf("aborting %s/%d producer %d: %w", h.Topic, h.Partition, h.ProducerID, err))
			continue
		}
		fmt.Fprintf(e.stdout, "aborted %s/%d producer %d\n", h.Topic, h.Partition, h.ProducerID)
	}
	return errors.Join(errs...)
}
