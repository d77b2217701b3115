package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// maxLine bounds one input line of produce: a record of Kafka's default
// maximum size, 1 MiB, written as JSON, fits many times over.
const maxLine = 16 << 20

func (e *env) produce(ctx context.Context, args []string) error {
	fs := e.command("produce", "produce (-c FILE | --brokers ADDRS) --topic T [--file F] [--format json|raw|envelope] [--key-field F | --key-separator S] [--header k=v]...",
		"Writes one record per line of stdin (or --file) to a topic, and exits 1 unless every record was\n"+
			"written. --format json (the default): each line is a JSON value, the record's value; --key-field\n"+
			"takes the key from a field of it. raw: each line is the value as it is; --key-separator splits\n"+
			"a key off its front. envelope: each line is {\"key\": ..., \"value\": ..., \"headers\": {...}}, where a\n"+
			"string stands for its text and anything else for its JSON; a null value is a tombstone.\n"+
			"Blank lines are skipped; lines before a bad one are written.")
	t := fs.targetFlags()
	topic := fs.String("topic", "", "the `topic` to write; it must exist")
	file := fs.String("file", "", "read this `file` instead of stdin")
	format := fs.String("format", "json", "what each line is: json, raw or envelope")
	keyField := fs.String("key-field", "", "with json: the record key is this top-level `field` of each line's object")
	keySep := fs.String("key-separator", "", "with raw: the key is what comes before the first `separator` of each line")
	partition := fs.Int("partition", -1, "write every record to this partition (default: by key)")
	headers := fs.keyValues("header", "a header `name=value` for every record; repeat for more")
	if err := fs.parse(args); err != nil {
		return err
	}
	var parse lineParser
	switch *format {
	case "json":
		parse = jsonLine(*keyField)
	case "raw":
		parse = rawLine([]byte(*keySep))
	case "envelope":
		parse = envelopeLine
	default:
		return usagef("produce: --format %q: must be json, raw or envelope", *format)
	}
	switch {
	case *topic == "":
		return usagef("produce: --topic is required")
	case *keyField != "" && *format != "json":
		return usagef("produce: --key-field is for --format json")
	case *keySep != "" && *format != "raw":
		return usagef("produce: --key-separator is for --format raw")
	}

	in, name := e.stdin, "stdin"
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return usagef("produce: --file: %v", err)
		}
		defer f.Close()
		in, name = f, *file
	}
	if in == nil {
		in = bytes.NewReader(nil)
	}

	opts := []kgo.Opt{kgo.DefaultProduceTopic(*topic), kgo.RecordDeliveryTimeout(30 * time.Second)}
	if *partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
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

	var mu sync.Mutex
	var failed int
	var firstErr error
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if failed++; firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	}
	headerNames := slices.Sorted(maps.Keys(headers))
	sent := 0
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	line := 0
	var readErr error
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		r, err := parse(b)
		if err != nil {
			readErr = fmt.Errorf("%s:%d: %w", name, line, err)
			break
		}
		r.Topic = *topic
		if *partition >= 0 {
			r.Partition = int32(*partition)
		}
		for _, k := range headerNames {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(headers[k])})
		}
		cl.Produce(ctx, r, promise)
		sent++
	}
	if err := sc.Err(); err != nil && readErr == nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("a line is longer than %d bytes", maxLine)
		}
		readErr = fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if failed > 0 {
		return errors.Join(readErr, fmt.Errorf("produce: %d of %d records were not written to %s: %w", failed, sent, *topic, firstErr))
	}
	fmt.Fprintf(e.stdout, "produced %s to %s\n", count(sent, "record"), *topic)
	return readErr
}

// lineParser makes a record of one input line.
type lineParser func([]byte) (*kgo.Record, error)

func jsonLine(keyField string) lineParser {
	return func(b []byte) (*kgo.Record, error) {
		if !json.Valid(b) {
			var x any
			err := json.Unmarshal(b, &x)
			return nil, fmt.Errorf("not JSON: %v", err)
		}
		r := &kgo.Record{Value: bytes.Clone(b)}
		if keyField == "" {
			return r, nil
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, fmt.Errorf("--key-field %s: the line is not a JSON object", keyField)
		}
		k, ok := obj[keyField]
		if !ok {
			return nil, fmt.Errorf("--key-field %s: the object has no such field", keyField)
		}
		r.Key = textOrJSON(k)
		return r, nil
	}
}

func rawLine(sep []byte) lineParser {
	return func(b []byte) (*kgo.Record, error) {
		if len(sep) == 0 {
			return &kgo.Record{Value: bytes.Clone(b)}, nil
		}
		k, v, ok := bytes.Cut(b, sep)
		if !ok {
			return nil, fmt.Errorf("--key-separator %q is not in the line", sep)
		}
		return &kgo.Record{Key: bytes.Clone(k), Value: bytes.Clone(v)}, nil
	}
}

// envelope is one line of --format envelope; consume prints the same.
type envelope struct {
	Key     json.RawMessage   `json:"key"`
	Value   json.RawMessage   `json:"value"`
	Headers map[string]string `json:"headers"`
}

func envelopeLine(b []byte) (*kgo.Record, error) {
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf(`not an envelope {"key": ..., "value": ..., "headers": {...}}: %v`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("text after the envelope")
	}
	if env.Value == nil {
		return nil, errors.New(`the envelope has no "value" (null, for a tombstone)`)
	}
	r := &kgo.Record{Key: textOrJSON(env.Key), Value: textOrJSON(env.Value)}
	for _, k := range slices.Sorted(maps.Keys(env.Headers)) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(env.Headers[k])})
	}
	return r, nil
}

// textOrJSON returns the bytes a JSON value stands for: a string's text,
// nil for null (or nothing), the JSON itself for anything else.
func textOrJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []byte(s)
	}
	return bytes.Clone(raw)
}

// topicExists fails unless topic exists, rather than letting a client
// wait for it.
func topicExists(ctx context.Context, adm *kadm.Client, topic string) error {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("looking up topic %q: %w", topic, err)
	}
	if d, ok := details[topic]; !ok || d.Err != nil {
		return fmt.Errorf("topic %q does not exist (create it with `pipeline topics create %s`)", topic, topic)
	}
	return nil
}
