package engine

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/wire"
)

// key_by gives records a new key and moves each to the task that owns it,
// through an internal repartition topic, as Kafka Streams does:
//
//   - name: by_region
//     key_by: value.region
//
// The step writes its records, keyed anew, to <name>-<step>-repartition
// inside the checkpoint's transaction; the pipeline consumes that topic like
// a source (read_committed, offsets in the transaction), and the steps that
// read the key_by step read what comes back. Records of one new key thus
// reach one task, where keyed state can count them. It costs a round trip
// through Kafka: what a checkpoint writes there is processed by a later one.
type repartitionDef struct {
	name, path string
	topic      string
	key        *pipeline.Expr
	partitions int32
	// broadcast: each record, key kept, goes to every partition of the
	// topic, so every task reads every record (a broadcast step).
	broadcast bool
}

// buildBroadcast builds a broadcast step: like key_by, through an internal
// topic inside the checkpoint's transaction, but each record keeps its key
// and is written to every partition of the topic, so that every task of
// the steps after it reads every record, in the order it was read:
//
//   - name: limits_everywhere
//     from: limits
//     broadcast: {}
func buildBroadcast(cfg *config.Config, st *config.Step, spec *pipeline.Spec) *repartitionDef {
	d := &repartitionDef{name: st.Name, path: st.Path, topic: wire.RepartitionTopic(cfg.Name, st.Name), broadcast: true}
	switch v := spec.Value.(type) {
	case nil:
	case map[string]any:
		if len(v) > 0 {
			spec.Errorf("", "broadcast takes no settings: write broadcast: {}")
		}
	default:
		spec.Errorf("", "broadcast takes no settings: write broadcast: {}")
	}
	return d
}

type keyBySpec struct {
	Key        string `yaml:"key"`
	Partitions int32  `yaml:"partitions"`
}

func buildKeyBy(cfg *config.Config, st *config.Step, spec *pipeline.Spec) *repartitionDef {
	d := &repartitionDef{name: st.Name, path: st.Path, topic: wire.RepartitionTopic(cfg.Name, st.Name)}
	switch v := spec.Value.(type) {
	case string:
		d.key = spec.Expr("", v, pipeline.AnyResult)
	default:
		var ks keyBySpec
		if !spec.Decode(&ks) {
			return nil
		}
		if ks.Key == "" {
			spec.Errorf(".key", "required: the expression of the new key")
			return nil
		}
		if ks.Partitions < 0 {
			spec.Errorf(".partitions", "must not be negative")
		}
		d.key, d.partitions = spec.Expr(".key", ks.Key, pipeline.AnyResult), ks.Partitions
	}
	return d
}

// repartitionOp re-keys a record and writes it to the repartition topic.
type repartitionOp struct {
	def  *repartitionDef
	prod func(*kgo.Record)
	// copies is how many partitions a broadcast step writes each record to.
	copies int32

	// maxBytes is the largest record the repartition topic takes (0: no
	// limit), and limit the setting that makes it so.
	maxBytes int
	limit    string
}

func (o *repartitionOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	var k any
	var err error
	if o.def.broadcast {
		b, err := r.KeyBytes()
		if err != nil {
			return fmt.Errorf("broadcast: key: %w", err)
		}
		k = b
		if b == nil {
			k = []byte{}
		}
	} else if k, err = ctx.Eval().Eval(o.def.key, r); err != nil {
		return err
	}
	var key []byte
	switch t := k.(type) {
	case nil:
		return fmt.Errorf("key_by: the new key is null")
	case string:
		key = []byte(t)
	case []byte:
		key = t
	default:
		if key, err = codec.AppendJSON(nil, k); err != nil {
			return fmt.Errorf("key_by: %w", err)
		}
	}
	format := r.Value.Format()
	if r.Value.Changed() {
		format = pipeline.JSON
	}
	value, err := r.Value.Encode(format)
	if err != nil {
		return fmt.Errorf("key_by: value: %w", err)
	}
	kr := &kgo.Record{Topic: o.def.topic, Key: key, Value: value, Timestamp: r.Timestamp,
		Headers: make([]kgo.RecordHeader, 0, len(r.Headers)+1)}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: wire.HeaderValueFormat, Value: []byte(format.String())})
	if size := outputSize(kr); o.maxBytes > 0 && size > o.maxBytes {
		return tooLarge("key_by: record of about %d bytes for %s is larger than %s", size+batchHeader, o.def.topic, o.limit)
	}
	if !o.def.broadcast {
		o.prod(kr)
		return nil
	}
	if o.copies <= 0 {
		return fmt.Errorf("broadcast: the partitions of %s are not known", o.def.topic)
	}
	for p := range o.copies {
		c := kr
		if p < o.copies-1 {
			c = &kgo.Record{Topic: kr.Topic, Key: kr.Key, Value: kr.Value, Timestamp: kr.Timestamp, Headers: kr.Headers}
		}
		c.Partition = p
		o.prod(c)
	}
	return nil
}

// repartitionRecord turns a record read back from a repartition topic into
// a pipeline record: the value in the format its header names, that header
// removed.
func repartitionRecord(kr *kgo.Record, decs [3]*pipeline.Decoding) *pipeline.Record {
	format := pipeline.JSON
	for _, h := range kr.Headers {
		if h.Key == wire.HeaderValueFormat {
			if f, err := pipeline.ParseFormat(string(h.Value)); err == nil {
				format = f
			}
		}
	}
	r := new(pipeline.Record)
	r.Read(kr, decs[format])
	out := r.Headers[:0]
	for _, h := range r.Headers {
		if h.Key != wire.HeaderValueFormat {
			out = append(out, h)
		}
	}
	r.Headers = out
	if len(out) == 0 {
		r.Headers = nil
	}
	return r
}
