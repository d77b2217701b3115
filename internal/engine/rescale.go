package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// rescaler redistributes operator state (state.NewOperatorList,
// state.NewUnionList) when a step's number of tasks changed: partitions
// were added to its input. It runs at start-up, before the pipeline joins
// its group, with every instance stopped (an instance still running with
// the old partitions would go on writing the old layout).
//
// The redistribution is one transaction: every new task's state, each
// value saying the new task count, written to the changelog partition of
// its task. The changelog first gains the missing partitions; a crash
// between the two leaves old-layout records and new, empty partitions,
// which the next start-up recognizes and finishes. Two instances starting
// at once compute the same result from the same old state and write the
// same records.
type rescaler struct {
	cl   *kgo.Client // reads the changelogs
	base []kgo.Opt   // the client options of the transactional writer
	cfg  *config.Config
	g    *Graph
	log  *slog.Logger
}

// operatorState handles the changelog of step n, which has have partitions
// while the step runs tasks tasks. It returns false when the step keeps
// keyed state, which cannot move: the caller then checks the partition
// count as for any step.
func (rs *rescaler) operatorState(ctx context.Context, adm *kadm.Client, acc access, n *node, topic string, have, tasks int32) (bool, error) {
	if rs == nil || have > tasks {
		return false, nil
	}
	if et, ok := n.def.(pipeline.EventTimeUser); ok && et.UsesEventTime() {
		return false, nil // the task's event time is keyed state of its own
	}
	probe, err := rs.stores(n, 1, 0)
	if err != nil {
		return false, err
	}
	if len(state.KeyedStates(probe[0])) > 0 {
		return false, nil
	}
	if have == tasks {
		// The layout is current unless a redistribution was cut short:
		// then the partitions it added are still empty while older ones
		// are not.
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return true, fmt.Errorf("listing the end offsets of changelog %s: %w", topic, err)
		}
		var empty, used int
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 {
				used++
			} else {
				empty++
			}
		})
		if err := ends.Error(); err != nil {
			return true, fmt.Errorf("listing the end offsets of changelog %s: %w", topic, err)
		}
		if empty == 0 || used == 0 {
			return true, nil
		}
	}
	return true, rs.redistribute(ctx, adm, acc, n, topic, have, tasks)
}

// stores opens count fresh in-memory stores of step n's state, tasks
// from first on, with the operator's states registered.
func (rs *rescaler) stores(n *node, count, tasks int32) ([]*state.Store, error) {
	mem := state.NewMemory()
	def := n.stateful()
	fp := rs.g.stateFingerprint(n)
	out := make([]*state.Store, count)
	for i := range count {
		st, err := state.Open(mem, rs.cfg.Name+"/"+n.name, i, fp, nil)
		if err != nil {
			return nil, err
		}
		st.SetTaskCount(tasks)
		op, err := def.NewStatefulOperator(pipeline.TaskID(i), st)
		if err != nil {
			return nil, fmt.Errorf("step %s (%s): %w", n.name, n.path, err)
		}
		if c, ok := op.(pipeline.Closer); ok {
			_ = c.Close()
		}
		out[i] = st
	}
	return out, nil
}

// redistribute reads the changelog's have partitions and writes the state
// of tasks tasks.
func (rs *rescaler) redistribute(ctx context.Context, adm *kadm.Client, acc access, n *node, topic string, have, tasks int32) error {
	old, err := rs.stores(n, have, 0)
	if err != nil {
		return err
	}
	var layouts []int32
	for p, st := range old {
		err := offsets.ReadPartition(ctx, rs.cl, topic, int32(p), 0, func(recs []*kgo.Record, _ offsets.Progress) error {
			crecs := make([]state.ChangelogRecord, len(recs))
			for i, r := range recs {
				crecs[i] = state.ChangelogRecord{Key: r.Key, Value: r.Value, Offset: r.Offset}
			}
			return st.Restore(crecs, recs[len(recs)-1].Offset)
		})
		if err != nil {
			if errors.Is(err, state.ErrIncompatible) {
				return fmt.Errorf("step %s (%s): redistributing its state: the step's definition changed since its state was written: %w. "+
					"To start the step from empty state, stop every instance and run `pipeline state reset -c FILE --step %s`", n.name, n.path, err, n.name)
			}
			return fmt.Errorf("step %s (%s): reading partition %d of changelog %s to redistribute its state: %w", n.name, n.path, p, topic, err)
		}
		l, err := state.OperatorLayouts(st)
		if err != nil {
			return fmt.Errorf("step %s (%s): changelog %s partition %d: %w", n.name, n.path, topic, p, err)
		}
		layouts = append(layouts, l...)
	}
	slices.Sort(layouts)
	layouts = slices.Compact(layouts)
	switch {
	case len(layouts) == 0 && have == tasks:
		return nil
	case len(layouts) == 1 && layouts[0] == tasks:
		// Another instance finished it; grow the topic if it has not.
	case len(layouts) > 1:
		return fmt.Errorf("step %s (%s): changelog %s holds operator state written by %v tasks at once: "+
			"was an instance still running while partitions were added to the input? Stop every instance and start again", n.name, n.path, topic, layouts)
	}
	if have < tasks {
		resp, err := adm.UpdatePartitions(ctx, int(tasks), topic)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("step %s (%s): adding partitions to changelog %s (%d → %d) to redistribute its state: %w", n.name, n.path, topic, have, tasks, acc.deniedTopic(err, topic, true))
		}
	}
	if len(layouts) == 1 && layouts[0] == tasks {
		return nil
	}
	news, err := rs.stores(n, tasks, tasks)
	if err != nil {
		return err
	}
	if err := state.Redistribute(old, news); err != nil {
		return fmt.Errorf("step %s (%s): %w", n.name, n.path, err)
	}
	var recs []*kgo.Record
	for t, st := range news {
		for _, c := range st.Changes() {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(t), Key: c.Key, Value: c.Value})
		}
	}
	if err := rs.write(ctx, recs); err != nil {
		return fmt.Errorf("step %s (%s): writing its redistributed state to changelog %s: %w", n.name, n.path, topic, acc.explain(err))
	}
	rs.log.Info("redistributed operator state to a new number of tasks", "step", n.name, "changelog", topic,
		"from_tasks", have, "to_tasks", tasks, "records", len(recs))
	return nil
}

// write produces recs in one transaction, with the instance's
// transactional id (which also fences a zombie of it).
func (rs *rescaler) write(ctx context.Context, recs []*kgo.Record) error {
	opts := append(slices.Clone(rs.base),
		kgo.TransactionalID(rs.cfg.Transactions.ID(rs.cfg.InstanceID)),
		kgo.TransactionTimeout(rs.cfg.Transactions.Timeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, rs.cfg.Transactions.Timeout+30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		_ = cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
		return err
	}
	return cl.EndTransaction(ctx, kgo.TryCommit)
}
