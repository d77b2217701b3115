package pipeline

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/pipeline-run/pipeline/txsink"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Progress is the record every checkpoint writes to the audit topic inside
// its own transaction: what it consumed and what it wrote. Since it commits
// or aborts with the outputs, the committed progress records are an exact
// account of the pipeline's history, which `pipeline audit` checks against
// the topics themselves.
type Progress struct {
	Version    int              `json:"v"`
	Pipeline   string           `json:"pipeline"`
	Group      string           `json:"group"`
	Instance   string           `json:"instance"`
	Run        string           `json:"run"` // one process's run, so checkpoint ids are unique with it
	Checkpoint CheckpointID     `json:"checkpoint"`
	Time       int64            `json:"time"` // Unix milliseconds
	Inputs     []ProgressInput  `json:"inputs"`
	Outputs    []ProgressOutput `json:"outputs"`
}

// ProgressInput is the offsets of one input partition a checkpoint
// consumed, First to Last included.
type ProgressInput struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	First     int64  `json:"first"`
	Last      int64  `json:"last"`
}

// ProgressOutput is how many records a checkpoint wrote to one partition
// (the dead-letter topic included; the progress record itself not).
type ProgressOutput struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Records   int64  `json:"records"`
}

// progressVersion is the format of Progress records.
const progressVersion = 1

// progressRecord builds the checkpoint's progress record from what it
// consumed and what was acknowledged.
func (rt *runtime) progressRecord(id CheckpointID, acks map[txsink.TopicPartition]int64) *kgo.Record {
	p := Progress{
		Version: progressVersion, Pipeline: rt.cfg.Name, Group: rt.cfg.Group, Instance: rt.cfg.InstanceID,
		Run: rt.runID, Checkpoint: id, Time: time.Now().UnixMilli(),
	}
	for _, r := range rt.track.Open() {
		p.Inputs = append(p.Inputs, ProgressInput{Topic: r.Topic, Partition: r.Partition, First: r.First, Last: r.Last})
	}
	for tp, n := range acks {
		p.Outputs = append(p.Outputs, ProgressOutput{Topic: tp.Topic, Partition: tp.Partition, Records: n})
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
