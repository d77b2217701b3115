package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// batchOf is an operator that is not keyed and keeps operator state, as
// Flink's CheckpointedFunction: it gathers its task's record values and
// emits them size at a time as one record, {"batch": id, "values": [...]}.
// In YAML:
//
//	steps:
//	  - name: batches
//	    batch_of: {size: 100}
//
// A batch cut by a checkpoint goes on in the next one: the values not sent
// yet are operator list state, exactly-once with the outputs. Batch ids
// ("g0-t2-17": generation, task, number) must never repeat, even when
// partitions are added to the input and the values not sent yet are split
// among more tasks. Each task's counter is union list state: after such a
// change every task gets every old counter, and a task that finds more
// than its own starts a generation above all of them.
type batchOf struct{ size int }

type batchOfSpec struct {
	Size int `yaml:"size"`
}

func newBatchOf(s *pipeline.Spec) (pipeline.Definition, error) {
	var bs batchOfSpec
	if !s.Decode(&bs) {
		return nil, nil
	}
	if bs.Size < 1 {
		s.Errorf(".size", "required: how many values make a batch, at least 1 (found %d)", bs.Size)
		return nil, nil
	}
	return &batchOf{size: bs.Size}, nil
}

func (b *batchOf) Outputs() []string { return nil }

// Fingerprint names what the state means; the size does not change it: a
// new size applies to the values already gathered.
func (b *batchOf) Fingerprint() string { return "batch_of:v1" }

func (b *batchOf) NewOperator(pipeline.TaskID) (pipeline.Operator, error) {
	return nil, errors.New("batch_of needs a state store")
}

// counter is a task's batch counter: the next batch is
// g<Gen>-t<Task>-<N>.
type counter struct {
	Gen  int `json:"gen"`
	Task int `json:"task"`
	N    int `json:"n"`
}

// NewStatefulOperator registers the operator state of one task: the
// values not sent yet (split among the tasks when their number changes)
// and the batch counter (given whole to every task).
func (b *batchOf) NewStatefulOperator(task pipeline.TaskID, st *state.Store) (pipeline.Operator, error) {
	pending, err := state.NewOperatorList[json.RawMessage](st, "pending")
	if err != nil {
		return nil, err
	}
	counters, err := state.NewUnionList[counter](st, "counter")
	if err != nil {
		return nil, err
	}
	return &batchOp{size: b.size, task: int(task), pending: pending, counters: counters}, nil
}

type batchOp struct {
	size, task int
	pending    *state.OperatorList[json.RawMessage]
	counters   *state.OperatorList[counter]
}

// Process adds r's value to the task's batch, and emits the batch once it
// has size values.
func (o *batchOp) Process(ctx pipeline.Context, r *pipeline.Record) error {
	v, err := r.Value.Encode(pipeline.JSON)
	if err != nil {
		return fmt.Errorf("batch_of: value: %w", err)
	}
	if err := o.pending.Add(json.RawMessage(v)); err != nil {
		return err
	}
	values, err := o.pending.Get()
	if err != nil || len(values) < o.size {
		return err
	}
	c, err := o.counter()
	if err != nil {
		return err
	}
	id := "g" + strconv.Itoa(c.Gen) + "-t" + strconv.Itoa(c.Task) + "-" + strconv.Itoa(c.N)
	out, err := json.Marshal(map[string]any{"batch": id, "values": values})
	if err != nil {
		return err
	}
	c.N++
	if err := o.counters.Update([]counter{c}); err != nil {
		return err
	}
	if err := o.pending.Clear(); err != nil {
		return err
	}
	r.Key = pipeline.RawValue([]byte(id), pipeline.String)
	r.Value = pipeline.RawValue(out, pipeline.JSON)
	ctx.Emit(r)
	return nil
}

// counter returns the task's batch counter. A task that finds its own
// counter alone goes on with it. One that finds others (partitions were
// added, and it got every old task's counter) or none starts a generation
// above every counter it sees: no id of an old task can come again.
func (o *batchOp) counter() (counter, error) {
	cs, err := o.counters.Get()
	if err != nil {
		return counter{}, err
	}
	if len(cs) == 1 && cs[0].Task == o.task {
		return cs[0], nil
	}
	c := counter{Task: o.task}
	for _, old := range cs {
		c.Gen = max(c.Gen, old.Gen+1)
	}
	return c, nil
}
