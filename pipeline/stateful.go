package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// StatefulDefinition is a Definition whose operators keep keyed state. The
// runtime gives each task's operator a state.Store, writes the store's
// changes to the step's changelog topic (one partition per task) inside
// every checkpoint's transaction, commits or aborts them with it, and
// restores the store from the changelog before the task processes anything.
//
// State is per task, and a task is a source partition: an operator must only
// keep state for keys whose records all reach the same task, that is for
// the keys the input is partitioned by.
type StatefulDefinition interface {
	Definition
	// Fingerprint identifies what the state means. State written under
	// another fingerprint is refused at start-up rather than misread.
	Fingerprint() string
	// NewStatefulOperator returns the operator of one task, over its store.
	NewStatefulOperator(task TaskID, st *state.Store) (Operator, error)
}

// ChangelogTopic is the changelog topic of a stateful step.
func ChangelogTopic(pipelineName, step string) string {
	return pipelineName + "-" + step + "-changelog"
}

func (n *node) stateful() StatefulDefinition {
	if n.kind != stepNode || n.parallel != nil {
		return nil
	}
	sd, _ := n.def.(StatefulDefinition)
	return sd
}

// openStores opens and restores the stores of a new task.
func (rt *runtime) openStores(t *task) error {
	for _, n := range rt.g.nodes {
		sd := n.stateful()
		if sd == nil {
			continue
		}
		st, err := state.Open(rt.backend, rt.cfg.Name+"/"+n.name, int32(t.id), sd.Fingerprint(), nil)
		if err != nil {
			return fmt.Errorf("step %s (%s), task %d: %w", n.name, n.path, t.id, err)
		}
		t.stores[n.idx] = st
		if err := rt.restore(n, t.id, st); err != nil {
			return err
		}
	}
	return nil
}

// restore brings st up to the changelog's last stable offset.
func (rt *runtime) restore(n *node, id TaskID, st *state.Store) error {
	topic := rt.changelogs[n.idx]
	from := st.AppliedOffset() + 1
	ctx, cancel := context.WithTimeout(rt.restoreCtx, 10*time.Minute)
	defer cancel()
	start, lastLog := time.Now(), time.Now()
	var count int64
	err := offsets.ReadPartition(ctx, rt.restoreCl, topic, int32(id), from, func(recs []*kgo.Record, p offsets.Progress) error {
		crecs := make([]state.ChangelogRecord, len(recs))
		for i, r := range recs {
			crecs[i] = state.ChangelogRecord{Key: r.Key, Value: r.Value, Offset: r.Offset}
		}
		if err := st.Restore(crecs, recs[len(recs)-1].Offset); err != nil {
			return err
		}
		count += int64(len(recs))
		rt.p.stats.restored.Add(int64(len(recs)))
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			rt.log.Info("restoring state", "step", n.name, "task", id, "percent", 100*p.Done/max(p.Total, 1),
				"records", count, "records_per_s", int(float64(count)/time.Since(start).Seconds()))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("restoring step %s (%s), task %d from %s: %w", n.name, n.path, id, topic, err)
	}
	if count == 0 {
		return nil
	}
	elapsed := time.Since(start)
	rt.log.Info("state restored", "step", n.name, "task", id, "changelog", topic, "from_offset", from,
		"records", count, "records_per_s", int(float64(count)/max(elapsed.Seconds(), 1e-6)), "duration", elapsed.Round(time.Millisecond))
	return nil
}

// expirePerCheckpoint bounds the expired entries one store removes per
// checkpoint, so a mass expiry cannot stall one.
const expirePerCheckpoint = 10000

// logChanges writes every store's changes since the last checkpoint to its
// changelog partition, inside the open transaction. Tasks are idle (after
// the barrier).
func (rt *runtime) logChanges() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	now := time.Now()
	for _, t := range rt.tasks {
		for idx, st := range t.stores {
			if st == nil {
				continue
			}
			// Entries whose TTL passed are removed a bounded number at a
			// time, oldest first, and their tombstones join this
			// checkpoint's changes.
			if _, err := st.Expire(now, expirePerCheckpoint); err != nil {
				rt.log.Warn("expiring state", "task", t.id, "err", err)
			}
			for _, c := range st.Changes() {
				rt.produce(&kgo.Record{Topic: rt.changelogs[idx], Partition: int32(t.id), Key: c.Key, Value: c.Value})
			}
		}
	}
}

// settleStores ends the stores' checkpoint like the transaction ended:
// committed changes become the stores' state, at the changelog offset they
// were written at; otherwise they are dropped. A store that fails to commit
// locally is closed with its task, which restores it from the changelog
// when it next gets records.
func (rt *runtime) settleStores(committed bool) {
	var broken []*task
	rt.mu.Lock()
	for id, t := range rt.tasks {
		for idx, st := range t.stores {
			if st == nil {
				continue
			}
			var err error
			if committed {
				last := int64(-1)
				if o, ok := rt.sink.LastOffset(rt.changelogs[idx], int32(t.id)); ok {
					last = o
				}
				err = st.Commit(last)
			} else {
				err = st.Abort()
			}
			if err != nil {
				rt.log.Warn("state store could not settle its checkpoint; it will be restored from its changelog", "task", t.id, "err", err)
				broken = append(broken, t)
				delete(rt.tasks, id)
				break
			}
		}
	}
	var keys, bytes, disk int64
	for _, t := range rt.tasks {
		for _, st := range t.stores {
			if st == nil {
				continue
			}
			s := st.Stats()
			if s.Keys < 0 || keys < 0 {
				keys = -1
			} else {
				keys += s.Keys
			}
			bytes += s.Bytes
			disk += s.DiskBytes
		}
	}
	rt.mu.Unlock()
	rt.p.stats.stateKeys.Store(keys)
	rt.p.stats.stateBytes.Store(bytes)
	rt.p.stats.stateDisk.Store(disk)
	for _, t := range broken {
		t.stop()
	}
}

// dropTasks closes every task, so that each restores its state from the
// changelog when it next gets records: after a rebuild, the outcome of the
// last transaction is known only to the broker.
func (rt *runtime) dropTasks() {
	rt.mu.Lock()
	tasks := rt.tasks
	rt.tasks = map[TaskID]*task{}
	rt.parts = map[TaskID]map[string]bool{}
	rt.mu.Unlock()
	for _, t := range tasks {
		t.stop()
	}
}

// dropState frees the memory backend's copy of a revoked task's state: the
// new owner restores it from the changelog, and if the partition comes back
// here it is restored again. Pebble keeps its copy on disk, so that a
// returning partition replays only the tail.
func (rt *runtime) dropState(id TaskID) {
	if _, ok := rt.backend.(*state.Memory); !ok {
		return
	}
	for _, n := range rt.g.nodes {
		if n.stateful() == nil {
			continue
		}
		if err := state.Reset(rt.backend, rt.cfg.Name+"/"+n.name, int32(id)); err != nil {
			rt.log.Warn("dropping a revoked task's state", "step", n.name, "task", id, "err", err)
		}
	}
}

// manualPartitioner writes records of the given topics to the partition
// they name (changelogs: the task's partition; the audit topic) and
// partitions the others by key, as Kafka's clients do by default.
type manualPartitioner struct {
	manual map[string]bool
	byKey  kgo.Partitioner
}

func (m manualPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if m.manual[topic] {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return m.byKey.ForTopic(topic)
}
