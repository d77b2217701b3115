package engine

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/wire"
)

// Watermarks across key_by: every task writes its watermark into each
// partition of the repartition topics it writes, and the readers take the
// minimum over the writers (eventtime.go).

// writeWatermarks writes, for every key_by step, each of this instance's
// tasks' watermark to every partition of the step's repartition topic,
// inside the open checkpoint, when it changed since the last one written:
// the tasks reading that topic take the minimum over the writers, so a
// window after a key_by closes only once every upstream task passed it.
// Tasks are idle.
func (rt *runtime) writeWatermarks() {
	if !rt.g.eventTime {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, n := range rt.g.nodes {
		if n.repart == nil {
			continue
		}
		parts := rt.topicParts[n.repart.topic]
		if parts <= 0 {
			parts = 1
		}
		rt.writeIdle(n, parts)
		for _, t := range rt.tasks {
			if t.time == nil || t.time.cons[n.idx] == nil {
				continue
			}
			c := t.time.cons[n.idx]
			idle := c.idle()
			if idle == c.sentIdle && c.wm == c.sent {
				continue
			}
			if !idle && c.wm == noTime {
				continue
			}
			c.sent, c.sentIdle = c.wm, idle
			v := wire.FormatWatermark(int32(t.id), c.wm, idle)
			for p := range parts {
				rt.internalOut.Add(1)
				rt.produce(&kgo.Record{Topic: n.repart.topic, Partition: p,
					Headers: []kgo.RecordHeader{{Key: wire.HeaderWatermark, Value: v}}})
			}
		}
	}
}

// writeIdle writes, for key_by node n, an idle mark for each partition
// number this instance owns on every topic n reads but has no task for
// (nothing came from it), once it has been owned for the topics'
// idle_timeout: a partition without records must not hold the watermark
// back for ever.
func (rt *runtime) writeIdle(n *node, parts int32) {
	now := rt.clock().Now()
	for id, topics := range rt.owned {
		if _, ok := rt.tasks[id]; ok || rt.restores[id] != nil || rt.idleSent[n.idx][id] || rt.idleSentOpen[n.idx][id] {
			continue
		}
		idle := false
		for _, topic := range n.upTopics {
			if p, ok := rt.topicParts[topic]; ok && int32(id) >= p {
				continue
			}
			since, ok := topics[topic]
			src := rt.g.byTopic[topic]
			if !ok || src == nil || src.et == nil || src.et.idle <= 0 || now.Sub(since) < src.et.idle {
				idle = false
				break
			}
			idle = true
		}
		if !idle {
			continue
		}
		if rt.idleSentOpen == nil {
			rt.idleSentOpen = map[int]map[pipeline.TaskID]bool{}
		}
		if rt.idleSentOpen[n.idx] == nil {
			rt.idleSentOpen[n.idx] = map[pipeline.TaskID]bool{}
		}
		rt.idleSentOpen[n.idx][id] = true
		v := wire.FormatWatermark(int32(id), noTime, true)
		for p := range parts {
			rt.internalOut.Add(1)
			rt.produce(&kgo.Record{Topic: n.repart.topic, Partition: p,
				Headers: []kgo.RecordHeader{{Key: wire.HeaderWatermark, Value: v}}})
		}
	}
}

// settleIdle ends the checkpoint for the idle marks of writeIdle.
func (rt *runtime) settleIdle(committed bool) {
	if committed {
		for idx, ids := range rt.idleSentOpen {
			if rt.idleSent == nil {
				rt.idleSent = map[int]map[pipeline.TaskID]bool{}
			}
			if rt.idleSent[idx] == nil {
				rt.idleSent[idx] = map[pipeline.TaskID]bool{}
			}
			for id := range ids {
				rt.idleSent[idx][id] = true
			}
		}
	}
	rt.idleSentOpen = nil
	// A partition that now has a task writes its own watermarks.
	for _, ids := range rt.idleSent {
		for id := range ids {
			if _, ok := rt.tasks[id]; ok {
				delete(ids, id)
			}
		}
	}
}

// isWatermark reports whether a record read from a repartition topic is a
// watermark record rather than data.
func isWatermark(kr *kgo.Record) bool {
	return len(kr.Headers) == 1 && kr.Headers[0].Key == wire.HeaderWatermark
}

// watermarkPartitioner places watermark records of a repartition topic on
// the partition they name, and data records by key.
type watermarkPartitioner struct{ byKey kgo.TopicPartitioner }

func (p watermarkPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return isWatermark(r) || p.byKey.RequiresConsistency(r)
}

func (p watermarkPartitioner) Partition(r *kgo.Record, n int) int {
	if isWatermark(r) {
		return int(r.Partition)
	}
	return p.byKey.Partition(r, n)
}
