package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func (e *env) consume(ctx context.Context, args []string) error {
	fs := e.command("consume", "consume (-c FILE | --brokers ADDRS) --topic T [--from earliest|latest] [--isolation committed|uncommitted] [--max N] [--timeout D]",
		"Prints the records of a topic, one JSON object a line: topic, partition, offset, key, value,\n"+
			"headers and timestamp. A key or value that is JSON is printed as it is, anything else as a\n"+
			"string (as produce --format envelope reads them back). It reads read_committed, and follows\n"+
			"the topic until SIGINT or SIGTERM, --max records or --timeout; with --max, ending by the\n"+
			"timeout with fewer records exits 1.")
	t := fs.targetFlags()
	topic := fs.String("topic", "", "the `topic` to read; it must exist")
	from := fs.String("from", "earliest", "where to start in each partition: earliest or latest")
	isolation := fs.String("isolation", "committed", "committed: only records of committed transactions (read_committed); uncommitted: every record")
	maxN := fs.Int("max", 0, "stop after this many records (default: no limit)")
	timeout := fs.duration("timeout", 0, "stop after this `duration` (default: none)")
	if err := fs.parse(args); err != nil {
		return err
	}
	opts := []kgo.Opt{}
	switch *from {
	case "earliest":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	case "latest":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	default:
		return usagef("consume: --from %q: must be earliest or latest", *from)
	}
	switch *isolation {
	case "committed":
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	case "uncommitted":
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	default:
		return usagef("consume: --isolation %q: must be committed or uncommitted", *isolation)
	}
	switch {
	case *topic == "":
		return usagef("consume: --topic is required")
	case *maxN < 0:
		return usagef("consume: --max must not be negative, found %d", *maxN)
	}
	opts = append(opts, kgo.ConsumeTopics(*topic))

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := e.connect(dctx, t, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := topicExists(dctx, kadm.NewClient(cl), *topic); err != nil {
		return err
	}

	pctx := ctx
	if *timeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	enc := json.NewEncoder(e.stdout)
	n := 0
	for *maxN == 0 || n < *maxN {
		fetches := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			break
		}
		var errs []error
		fetches.EachError(func(t string, p int32, err error) {
			errs = append(errs, fmt.Errorf("reading %s/%d: %w", t, p, err))
		})
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		for it := fetches.RecordIter(); !it.Done() && (*maxN == 0 || n < *maxN); n++ {
			if err := enc.Encode(consumedOf(it.Next())); err != nil {
				return err
			}
		}
	}
	if ctx.Err() == nil && *maxN > 0 && n < *maxN {
		return fmt.Errorf("consume: %d of %d records of %s after --timeout %s", n, *maxN, *topic, *timeout)
	}
	return nil
}

// consumed is one record as consume prints it.
type consumed struct {
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       json.RawMessage   `json:"key"`
	Value     json.RawMessage   `json:"value"`
	Headers   map[string]string `json:"headers"`
	Timestamp string            `json:"timestamp"` // RFC 3339, UTC, milliseconds
}

func consumedOf(r *kgo.Record) consumed {
	c := consumed{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: asJSON(r.Key), Value: asJSON(r.Value),
		Headers: make(map[string]string, len(r.Headers)), Timestamp: r.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	for _, h := range r.Headers {
		c.Headers[h.Key] = string(h.Value)
	}
	return c
}

// asJSON returns b as a JSON value: b itself, on one line, when it is
// JSON; otherwise a string of it; null for nil.
func asJSON(b []byte) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	var buf bytes.Buffer
	if json.Valid(b) && json.Compact(&buf, b) == nil {
		return buf.Bytes()
	}
	s, _ := json.Marshal(string(b))
	return s
}
