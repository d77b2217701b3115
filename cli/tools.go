package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func (e *env) validate(args []string) error {
	fs := e.command("validate", "validate -c FILE",
		"Checks a configuration as run does (environment overrides, operators and expressions\nincluded) without connecting to Kafka, and prints its graph. Every problem is\nreported with its YAML path and line; exit 2.")
	path := fs.String("c", "", "the pipeline's YAML `file`")
	if err := fs.parse(args); err != nil {
		return err
	}
	cfg, g, _, err := e.loadRunConfig(*path)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: valid: %s\n", cfg.Name, g.Summary())
	return nil
}

func (e *env) broker(ctx context.Context, args []string) error {
	fs := e.command("broker", "broker [--port N] [--data-dir DIR] [--topics a,b --partitions P]",
		"Runs the embedded Kafka-protocol broker on 127.0.0.1 until SIGINT or SIGTERM,\nfor development and tests.")
	port := fs.Int("port", 9092, "port to listen on, on 127.0.0.1")
	dir := fs.String("data-dir", "", "persist to this `directory` (default: memory only)")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	parts := fs.Int("partitions", 1, "partitions of the topics created at start")
	txnMax := fs.Int("txn-max-timeout-ms", 0, "the broker's transaction.max.timeout.ms (default: Kafka's 900000)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := checkLevel(*level); err != nil {
		return err
	}
	if *port < 0 || *port > 65535 {
		return usagef("broker: --port %d is not a port", *port)
	}
	if *parts < 1 {
		return usagef("broker: --partitions must be at least 1")
	}
	var ts []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			ts = append(ts, t)
		}
	}
	log := newLogger(e.stderr, config.Log{Level: *level}, "")
	b, err := broker.Start(broker.Options{Port: *port, DataDir: *dir, Topics: ts, Partitions: int32(*parts), TxnMaxTimeoutMs: *txnMax, Logger: log})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "broker listening on %s\n", b.Addrs()[0])
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(e.stdout, "broker stopped")
	return nil
}

// clientFor connects a client reading committed data to the pipeline's
// cluster. The embedded broker lives inside `run`; tools cannot reach it.
func (e *env) clientFor(cfg *config.Config) (*kgo.Client, error) {
	if cfg.Brokers.Embedded {
		return nil, usagef("brokers: embedded: the embedded broker lives inside `pipeline run`; point brokers at a running broker (e.g. `pipeline broker`)")
	}
	base, err := pipeline.ClientOpts(cfg, nil, nil)
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(base, kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
}

// adminFor is clientFor for an admin client; closing it closes the client.
func (e *env) adminFor(cfg *config.Config) (*kadm.Client, error) {
	cl, err := e.clientFor(cfg)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

func (e *env) offsets(ctx context.Context, args []string) error {
	return e.group(ctx, "offsets", args, []subcommand{
		{"show", "offsets show -c FILE", "Prints the group's committed offset, the end and the lag of each partition the\npipeline reads.", e.offsetsShow},
		{"reset", "offsets reset -c FILE --to earliest|latest", "Moves the group's committed offsets of every source topic to its start or end.\nStop every instance first, and wait consumer.session_timeout.", e.offsetsReset},
	})
}

func (e *env) offsetsReset(ctx context.Context, fs *command, args []string) error {
	path := fs.String("c", "", "the pipeline's YAML `file`")
	to := fs.String("to", "", "where to move the offsets: earliest or latest")
	if err := fs.parse(args); err != nil {
		return err
	}
	var rt offsets.ResetTo
	switch *to {
	case "earliest":
		rt = offsets.ToStart
	case "latest":
		rt = offsets.ToEnd
	default:
		return usagef("offsets reset: --to must be earliest or latest, found %q", *to)
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
	os, err := offsets.Reset(ctx, adm, cfg.Group, rt, g.SourceTopics()...)
	if err != nil {
		return err
	}
	os.Each(func(o kadm.Offset) {
		fmt.Fprintf(e.stdout, "%s/%d -> %d\n", o.Topic, o.Partition, o.At)
	})
	return nil
}

func (e *env) offsetsShow(ctx context.Context, fs *command, args []string) error {
	path := fs.String("c", "", "the pipeline's YAML `file`")
	if err := fs.parse(args); err != nil {
		return err
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	cl, err := e.clientFor(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lags, err := offsets.Describe(ctx, cl, cfg.Group, g.SourceTopics()...)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\n")
	for _, l := range lags {
		c := fmt.Sprint(l.Committed)
		if l.Committed < 0 {
			c = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\n", l.Topic, l.Partition, c, l.End, l.Lag)
	}
	tw.Flush()
	return err
}

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
