package engine

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/txsink"
	"github.com/pipeline-run/pipeline/wire"
)

// progressRecord builds the checkpoint's progress record from what it
// consumed and what was acknowledged.
func (rt *runtime) progressRecord(id wire.CheckpointID, acks map[txsink.TopicPartition]int64) *kgo.Record {
	p := wire.Progress{
		Version: wire.ProgressVersion, Pipeline: rt.cfg.Name, Group: rt.cfg.Group, Instance: rt.cfg.InstanceID,
		Run: rt.runID, Checkpoint: id, Time: time.Now().UnixMilli(),
	}
	for _, r := range rt.track.Open() {
		p.Inputs = append(p.Inputs, wire.ProgressInput{Topic: r.Topic, Partition: r.Partition, First: r.First, Last: r.Last})
	}
	for tp, n := range acks {
		p.Outputs = append(p.Outputs, wire.ProgressOutput{Topic: tp.Topic, Partition: tp.Partition, Records: n})
	}
	sort.Slice(p.Outputs, func(i, j int) bool {
		if p.Outputs[i].Topic != p.Outputs[j].Topic {
			return p.Outputs[i].Topic < p.Outputs[j].Topic
		}
		return p.Outputs[i].Partition < p.Outputs[j].Partition
	})
	b, _ := json.Marshal(p) // plain types: cannot fail
	return &kgo.Record{Topic: rt.cfg.Audit.Topic, Key: []byte(rt.cfg.InstanceID), Value: b, Partition: 0}
}
