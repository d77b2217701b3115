package engine

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/codec"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/wire"
)

// sinkDef is a configured sink: where and how records are written.
type sinkDef struct {
	name, path             string
	topic                  string
	partitions             int32
	key, value             *pipeline.Expr
	headers                []pipeline.HeaderExpr
	keyFormat, valueFormat pipeline.Format
	positions              bool // audit.source_positions: stamp records with HeaderSource and HeaderOutput
}

// recordOverhead is a generous bound on what a record adds to its key,
// value and headers in a batch (lengths, attributes, offset and timestamp
// deltas).
const recordOverhead = 64

func buildSink(sk *config.Sink, positions bool, line func(string) int, errs *config.Errors, reads *pipeline.ValueReads) *sinkDef {
	spec := pipeline.NewSpec(sk.Name, "sink", sk.Path, nil, 1, line)
	spec.Reads() // through its expressions only
	defer func() {
		*errs = append(*errs, spec.Problems()...)
		addReads(reads, spec.ValueReads())
	}()
	d := &sinkDef{name: sk.Name, path: sk.Path, topic: sk.Topic, partitions: sk.Partitions, positions: positions}
	var err error
	if d.valueFormat, err = pipeline.ParseFormat(sk.Format); err != nil {
		spec.Errorf(".format", "%v", err)
	}
	if d.keyFormat, err = parseKeyFormat(sk.KeyFormat); err != nil {
		spec.Errorf(".key_format", "%v", err)
	}
	if sk.Key != "" {
		d.key = spec.Expr(".key", sk.Key, pipeline.AnyResult)
	}
	if sk.Value != "" {
		d.value = spec.Expr(".value", sk.Value, pipeline.AnyResult)
	}
	d.headers = spec.HeaderExprs(".headers", sk.Headers)
	return d
}

// Producer is where sinks and the dead-letter topic send records: the
// open transaction.
type Producer interface {
	Produce(r *kgo.Record)
}

// sinkOp writes records to the sink's topic through the transaction.
type sinkOp struct {
	def  *sinkDef
	prod Producer

	// maxBytes is the largest record the topic takes (0: no limit), and
	// limit the setting that makes it so.
	maxBytes int
	limit    string

	// With def.positions: how many records this sink wrote for each input
	// in checkpoint epoch. A map, not a counter for the last input: a
	// parallel stage's workers interleave the outputs of different inputs.
	ordinals map[pipeline.Position]uint32
	epoch    wire.CheckpointID

	// Output records and the JSON their values are encoded to are cut
	// from chunks, one allocation for many records: allocation and the
	// GC were a third of a pass-through's CPU. A chunk lives until the
	// last record cut from it is acknowledged and dropped.
	recs  []kgo.Record
	chunk codec.Chunk
}

const (
	recChunk = 64 // output records per allocation
)

// newRecord returns a zeroed record from the current chunk.
func (s *sinkOp) newRecord() *kgo.Record {
	if len(s.recs) == 0 {
		s.recs = make([]kgo.Record, recChunk)
	}
	kr := &s.recs[0]
	s.recs = s.recs[1:]
	return kr
}

// encodeValue encodes v as the sink writes it. A value an operator set is
// encoded into the current chunk when it is JSON that fits there.
func (s *sinkOp) encodeValue(v *pipeline.Value, f pipeline.Format) ([]byte, error) {
	if !v.Changed() || f == pipeline.String || f == pipeline.Bytes {
		return v.Encode(f)
	}
	out, ok, err := v.AppendJSON(s.chunk.Tail())
	if !ok {
		return v.Encode(f)
	}
	if err != nil {
		return nil, err
	}
	return s.chunk.Keep(out), nil
}

func (s *sinkOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	var key, value []byte
	var err error
	if s.def.key != nil {
		x, err := ctx.Eval().Eval(s.def.key, r)
		if err != nil {
			return err
		}
		if key, err = pipeline.Encode(x, s.def.keyFormat); err != nil {
			return fmt.Errorf("key: %w", err)
		}
	} else if key, err = r.Key.Encode(s.def.keyFormat); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if s.def.value != nil {
		x, err := ctx.Eval().Eval(s.def.value, r)
		if err != nil {
			return err
		}
		if value, err = pipeline.Encode(x, s.def.valueFormat); err != nil {
			return fmt.Errorf("value: %w", err)
		}
	} else if value, err = s.encodeValue(&r.Value, s.def.valueFormat); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	out := kgo.Record{Topic: s.def.topic, Key: key, Value: value, Timestamp: r.Timestamp}
	n := len(r.Headers) + len(s.def.headers)
	stamp := s.def.positions && r.Source.Topic != "" // a record built from nothing has no position
	var ordinal uint32
	if stamp {
		n += 2
	}
	if n > 0 {
		out.Headers = make([]kgo.RecordHeader, 0, n)
		for _, h := range r.Headers {
			out.Headers = append(out.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		for _, h := range s.def.headers {
			x, err := ctx.Eval().Eval(h.Expr, r)
			if err != nil {
				return err
			}
			b, err := pipeline.Encode(x, pipeline.String)
			if err != nil {
				return fmt.Errorf("header %q: %w", h.Name, err)
			}
			out.Headers = append(out.Headers, kgo.RecordHeader{Key: h.Name, Value: b})
		}
		if stamp {
			ordinal = s.ordinal(ctx, r.Source)
			out.Headers = appendPosition(out.Headers, s.def.name, r.Source, ordinal)
		}
	}
	// A record the broker would refuse fails its transaction, and every
	// replay of it, for ever: refuse it here, where it can still go to
	// the dead-letter topic.
	if size := outputSize(&out); s.maxBytes > 0 && size > s.maxBytes {
		return tooLarge("output record of about %d bytes for %s is larger than %s", size+batchHeader, s.def.topic, s.limit)
	}
	if stamp {
		s.ordinals[r.Source] = ordinal + 1
	}
	// The input record as fetched becomes the output when r is the only
	// record made of it, as in passThrough: one allocation less per
	// record, of the few a stateless or keyed step makes.
	kr := r.TakeOrigin()
	if kr == nil {
		kr = s.newRecord()
	}
	*kr = out
	if h := ctx.(*opContext).task.held; h != nil {
		h.tag(kr)
	}
	s.prod.Produce(kr)
	return nil
}

// outputSize is a generous bound on what kr takes in a batch.
func outputSize(kr *kgo.Record) int {
	size := len(kr.Key) + len(kr.Value) + recordOverhead
	for _, h := range kr.Headers {
		size += len(h.Key) + len(h.Value) + 8
	}
	return size
}

// passThrough writes kr, a record as the client fetched it from a source
// whose only reader is this sink (see directSink), to the sink's topic: the
// same output Process would write, without the Record in between. It
// reports false, having written nothing, for a record Process must see (one
// too large for the producer, which goes to the dead-letter topic).
//
// kr itself becomes the output record: nothing else holds it once it is
// handed out (the offsets were noted when it was dispatched), and a replay
// after an abort fetches the input again.
func (s *sinkOp) passThrough(kr *kgo.Record, h *chunkHold) bool {
	if s.maxBytes > 0 && outputSize(kr) > s.maxBytes {
		return false
	}
	// What the fetch filled in and the producer does not set itself.
	kr.Topic, kr.Context = s.def.topic, nil
	if h != nil {
		h.tag(kr)
	}
	kr.Partition, kr.Offset, kr.LeaderEpoch = 0, 0, 0
	kr.Attrs, kr.ProducerID, kr.ProducerEpoch = kgo.RecordAttrs{}, 0, 0
	s.prod.Produce(kr)
	return true
}

// ordinal returns the HeaderOutput number of the next record for src. The
// counts start again with each checkpoint: an aborted one's records are
// replayed in the next, which must number them from 0 again. Every record
// of one checkpoint is processed before the next begins (the barrier): the
// coordinator moves rt.nextID on only while no task or worker runs, so the
// id read here is the record's checkpoint, and reading it needs no lock.
func (s *sinkOp) ordinal(ctx pipeline.Context, src pipeline.Position) uint32 {
	if id := ctx.(*opContext).task.rt.nextID; s.ordinals == nil || id != s.epoch {
		if s.ordinals == nil {
			s.ordinals = make(map[pipeline.Position]uint32)
		}
		clear(s.ordinals)
		s.epoch = id
	}
	return s.ordinals[src]
}

// appendPosition appends HeaderSource and HeaderOutput, their values
// sharing one allocation.
func appendPosition(hs []kgo.RecordHeader, sink string, src pipeline.Position, ordinal uint32) []kgo.RecordHeader {
	b := make([]byte, 0, len(src.Topic)+len(sink)+48)
	b = append(b, src.Topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(src.Partition), 10)
	b = append(b, '@')
	b = strconv.AppendInt(b, src.Offset, 10)
	n := len(b)
	b = append(b, sink...)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(ordinal), 10)
	return append(hs, kgo.RecordHeader{Key: wire.HeaderSource, Value: b[:n:n]}, kgo.RecordHeader{Key: wire.HeaderOutput, Value: b[n:]})
}
