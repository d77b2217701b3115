package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

func (n *node) stateful() pipeline.StatefulDefinition {
	if n.kind != stepNode || n.parallel != nil {
		return nil
	}
	sd, _ := n.def.(pipeline.StatefulDefinition)
	return sd
}

// keySource describes where the records reaching n get their key: the
// nearest key_by steps upstream (their key expression and partitions) or
// sources (their topics and key format). State kept under one key means
// nothing under another, so the key's source is part of the fingerprint of
// the state (stateFingerprint).
func (g *Graph) keySource(n *node) string {
	var out []string
	seen := map[*node]bool{}
	var walk func(*node)
	walk = func(n *node) {
		for _, in := range n.inputs {
			up := in.node
			if seen[up] {
				continue
			}
			seen[up] = true
			switch {
			case up.kind == sourceNode && up.internal:
				if w := g.byName[up.name+".repartition"]; w != nil && w.repart != nil && w.repart.broadcast {
					out = append(out, "broadcast "+up.name)
				} else if w != nil && w.repart != nil {
					by := "key_by " + w.repart.key.String()
					if w.repart.partitions > 0 {
						by += fmt.Sprintf(" (partitions %d)", w.repart.partitions)
					}
					out = append(out, by)
				}
			case up.kind == sourceNode:
				out = append(out, fmt.Sprintf("the record key of topics %s (key_format %s)", strings.Join(up.source.Topics, ","), up.keyFormat))
			default:
				walk(up)
			}
		}
	}
	walk(n)
	slices.Sort(out)
	return strings.Join(slices.Compact(out), "; ")
}

// stateFingerprint is the fingerprint stored with the state of step n: the
// operator's own, which covers what its state holds, and where its key
// comes from, which the operator cannot see.
func (g *Graph) stateFingerprint(n *node) string {
	sum := sha256.Sum256([]byte(g.keySource(n)))
	return n.stateful().Fingerprint() + "|key:" + hex.EncodeToString(sum[:8])
}

// openStores opens the stores of a new task, one per stateful step that
// runs in it, each checked against its changelog partition. The task's
// operators then register their states in them, and restoreStores brings
// them up to date with their changelogs. A step whose changelog has no
// partition for the task (its input has fewer partitions than the task's
// number) gets no store: none of its records are in this task.
//
// It returns what the stores have left to restore.
func (rt *runtime) openStores(t *task) (backlog, error) {
	var need backlog
	for _, n := range rt.g.nodes {
		if n.stateful() == nil {
			continue
		}
		st, b, err := rt.openStore(n, t.id)
		if err != nil {
			return need, err
		}
		t.stores[n.idx] = st
		need.offsets += b.offsets
		need.undecided = need.undecided || b.undecided
	}
	return need, nil
}

// openStore opens the store of step n in task id, or returns nil if the
// step has no such task. A local store that does not match its changelog
// partition (applied past its end, or behind its start: the topic was
// deleted and created again, or truncated) is discarded: a tail restore
// would keep state the changelog no longer has and skip the records the
// changelog has now.
func (rt *runtime) openStore(n *node, id pipeline.TaskID) (*state.Store, backlog, error) {
	topic := rt.changelogs[n.idx]
	ctx, cancel := context.WithTimeout(rt.restoreCtx, 2*time.Minute)
	defer cancel()
	b, err := changelogBounds(ctx, rt.restoreCl, topic, int32(id))
	if err != nil {
		return nil, backlog{}, fmt.Errorf("step %s (%s), task %d: listing the offsets of its changelog %s: %w", n.name, n.path, id, topic, err)
	}
	if !b.ok {
		return nil, backlog{}, nil
	}
	start, end := b.start, b.end
	// need is what is left to read once the store has applied applied.
	need := func(applied int64) backlog {
		return backlog{offsets: max(0, end-(applied+1)), undecided: b.stable < end}
	}
	name := rt.cfg.Name + "/" + n.name
	fp := rt.g.stateFingerprint(n)
	st, err := state.Open(rt.backend, name, int32(id), fp, rt.clock())
	applied := int64(-1)
	var ie *state.IncompatibleError
	switch {
	case errors.As(err, &ie) && ie.Offset < 0:
		// State of another definition, but it may be of a changelog
		// that is gone, and then it does not count.
		applied = ie.Applied
	case err != nil:
		return nil, backlog{}, rt.stateErr(n, id, err)
	default:
		applied = st.AppliedOffset()
	}
	tasks, _ := stepTasks(n, rt.topicParts)
	if applied < 0 || (applied+1 >= start && applied+1 <= end) {
		if err != nil {
			return nil, backlog{}, rt.stateErr(n, id, err)
		}
		st.SetTaskCount(tasks)
		return st, need(max(applied, start-1)), nil
	}
	rt.log.Warn("local state does not match its changelog (the topic was deleted and created again, or truncated); discarding it and restoring from the changelog",
		"step", n.name, "task", id, "changelog", topic, "applied_offset", applied, "changelog_start", start, "changelog_end", end)
	if st != nil {
		_ = st.Close()
	}
	if err := state.Reset(rt.backend, name, int32(id)); err != nil {
		return nil, backlog{}, fmt.Errorf("step %s (%s), task %d: discarding stale local state: %w", n.name, n.path, id, err)
	}
	if st, err = state.Open(rt.backend, name, int32(id), fp, rt.clock()); err != nil {
		return nil, backlog{}, rt.stateErr(n, id, err)
	}
	st.SetTaskCount(tasks)
	return st, need(start - 1), nil
}

// stateErr explains an error opening or restoring the state of step n.
func (rt *runtime) stateErr(n *node, id pipeline.TaskID, err error) error {
	if errors.Is(err, state.ErrIncompatible) {
		return fmt.Errorf("step %s (%s), task %d: the step's definition changed since its state was written, and the old state would be misread "+
			"(its state is now keyed by %s): %w. To start the step from empty state, stop every instance and run `pipeline state reset -c FILE --step %s`",
			n.name, n.path, id, rt.g.keySource(n), err, n.name)
	}
	return fmt.Errorf("step %s (%s), task %d: %w", n.name, n.path, id, err)
}

// absentStateOp stands for a stateful step in a task the step does not
// run in: its input has no partition of that number, so no record of the
// task can reach it.
type absentStateOp struct {
	step string
	task pipeline.TaskID
}

func (o absentStateOp) Process(pipeline.Context, *pipeline.Record) error {
	return fmt.Errorf("step %s got a record in task %d, which its changelog has no partition for", o.step, o.task)
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
	now := rt.clock().Now()
	for _, t := range rt.tasks {
		if t.time != nil {
			if err := t.time.persist(); err != nil {
				rt.fail(fmt.Errorf("task %d: writing its event time to its state: %w", t.id, err))
				return
			}
		}
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
			limit, which := rt.recordLimit(rt.changelogs[idx])
			for _, c := range st.Changes() {
				kr := &kgo.Record{Topic: rt.changelogs[idx], Partition: int32(t.id), Key: c.Key, Value: c.Value}
				if size := outputSize(kr); limit > 0 && size > limit {
					// No replay makes it fit: the state itself is too
					// large for its changelog.
					rt.fail(fmt.Errorf("step %s, task %d: the state of key %q is about %d bytes, larger than %s: it can never be written to its changelog; raise max.message.bytes of %s (and producer.batch_max_bytes), or keep less state per key",
						rt.g.nodes[idx].name, t.id, c.Key, size+batchHeader, which, rt.changelogs[idx]))
					return
				}
				rt.produce(kr)
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
	rt.settleIdle(committed)
	for id, t := range rt.tasks {
		if committed {
			rt.p.figures.addNodes(t.counts)
		}
		clear(t.counts)
		if t.time != nil {
			t.time.settle(committed)
		}
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
	bySteps := map[string]StepState{}
	for _, t := range rt.tasks {
		for idx, st := range t.stores {
			if st == nil {
				continue
			}
			s := st.Stats()
			name := rt.g.nodes[idx].name
			ss := bySteps[name]
			if s.Keys < 0 || ss.Keys < 0 {
				ss.Keys = -1
			} else {
				ss.Keys += s.Keys
			}
			ss.Bytes += s.Bytes
			bySteps[name] = ss
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
	if committed {
		// One sync for all the stores' commits: without it a killed
		// process could lose local commits of several checkpoints, and
		// replay them from the changelog at its next start.
		if ps, ok := rt.backend.(interface{ Persist() error }); ok {
			if err := ps.Persist(); err != nil {
				rt.log.Warn("state store commits could not be synced; a crash may replay them from the changelog", "err", err)
			}
		}
	}
	rt.p.figures.setState(bySteps)
	rt.p.stats.stateKeys.Store(keys)
	rt.p.stats.stateBytes.Store(bytes)
	rt.p.stats.stateDisk.Store(disk)
	for _, t := range broken {
		t.stop()
	}
}

// dropTasks closes every task, so that each restores its state from the
// changelog when it next gets records: after a rebuild, the outcome of the
// last transaction is known only to the broker. The state the stores
// committed is kept (a restore reads only what follows it), and so are the
// restores under way: their records are held back on the new client too.
func (rt *runtime) dropTasks() {
	rt.mu.Lock()
	tasks := rt.tasks
	rt.tasks = map[pipeline.TaskID]*task{}
	rt.parts = map[pipeline.TaskID]map[string]bool{}
	for _, r := range rt.restores {
		clear(r.rewind)
	}
	rt.mu.Unlock()
	for _, t := range tasks {
		t.stop()
	}
}

// dropState frees the memory backend's copy of a revoked task's state: the
// new owner restores it from the changelog, and if the partition comes back
// here it is restored again. Pebble keeps its copy on disk, so that a
// returning partition replays only the tail.
func (rt *runtime) dropState(id pipeline.TaskID) {
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
	marked map[string]bool // repartition topics: watermark records go where they say
	byKey  kgo.Partitioner
}

func (m manualPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if m.manual[topic] {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	if m.marked[topic] {
		return watermarkPartitioner{byKey: m.byKey.ForTopic(topic)}
	}
	return m.byKey.ForTopic(topic)
}
