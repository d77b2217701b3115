package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pipeline-run/pipeline/pipeline"
)

// revoked runs on the client's group goroutine when partitions are taken
// away. Rebalances are held until a checkpoint is done, so the tasks are
// idle; a task closes once no topic of its partition number is left.
func (rt *runtime) revoked(m map[string][]int32) {
	if rt.rebuilding.Load() {
		// The client closing for a rebuild gives its partitions up; the
		// new one takes them back. dropTasks closes the tasks; their
		// state, and the restores under way, are kept for it.
		return
	}
	var stop []*task
	var restores []*restoring
	rt.mu.Lock()
	rt.own(m, false)
	for topic, parts := range m {
		for _, p := range parts {
			id := pipeline.TaskID(p)
			delete(rt.parts[id], topic)
			if len(rt.parts[id]) == 0 {
				if t, ok := rt.tasks[id]; ok {
					stop = append(stop, t)
					delete(rt.tasks, id)
				}
				if r, ok := rt.restores[id]; ok {
					restores = append(restores, r)
					delete(rt.restores, id)
				}
				delete(rt.parts, id)
			}
		}
	}
	rt.mu.Unlock()
	for _, t := range stop {
		t.stop()
		rt.dropState(t.id)
	}
	for _, r := range restores {
		stopRestore(r)
		// A paused partition stays paused through rebalances: should it
		// come back, it must be fetched.
		rt.sink.Client().ResumeFetchPartitions(rt.partitionsOf(r.id))
		rt.dropState(r.id)
	}
	if len(stop)+len(restores) > 0 {
		rt.log.Info("tasks closed after their partitions were revoked", "tasks", len(stop), "restoring", len(restores))
	}
}

// assigned runs on the client's group goroutine when partitions are
// assigned. The first assignment after a rebuild drops the state kept for
// tasks the new client was not given back.
func (rt *runtime) assigned(m map[string][]int32) {
	rt.mu.Lock()
	rt.own(m, true)
	kept := rt.kept
	rt.kept = nil
	var restores []*restoring
	for id := range kept {
		for _, parts := range m {
			for _, p := range parts {
				if pipeline.TaskID(p) == id {
					delete(kept, id)
				}
			}
		}
	}
	for id := range kept {
		if r, ok := rt.restores[id]; ok {
			restores = append(restores, r)
			delete(rt.restores, id)
		}
	}
	rt.mu.Unlock()
	for _, r := range restores {
		stopRestore(r)
	}
	for id := range kept {
		rt.dropState(id)
	}
}

// own notes partitions assigned (or revoked) with the time they were first
// assigned: a partition that never had records stops holding the
// watermark back idle_timeout after that (writeWatermarks). rt.mu is held.
func (rt *runtime) own(m map[string][]int32, add bool) {
	if rt.owned == nil {
		rt.owned = map[pipeline.TaskID]map[string]time.Time{}
	}
	if add {
		rt.p.stats.rebalances.Add(1)
	}
	defer func() {
		n := 0
		for _, topics := range rt.owned {
			n += len(topics)
		}
		rt.p.stats.owned.Store(int64(n))
	}()
	now := rt.clock().Now()
	for topic, parts := range m {
		for _, p := range parts {
			id := pipeline.TaskID(p)
			if !add {
				delete(rt.owned[id], topic)
				for _, ids := range rt.idleSent {
					delete(ids, id)
				}
				continue
			}
			if rt.owned[id] == nil {
				rt.owned[id] = map[string]time.Time{}
			}
			if _, ok := rt.owned[id][topic]; !ok {
				rt.owned[id][topic] = now
			}
		}
	}
}

// groupErrors hears the group management errors of the client. A
// FENCED_INSTANCE_ID there means another member joined with our
// instance_id: a twin. It stops the pipeline at once, rather than at the
// next poll, which a producer fence by the same twin can come before.
type groupErrors struct{ rt *runtime }

func (h groupErrors) OnGroupManageError(err error) {
	if errors.Is(err, kerr.FencedInstanceID) {
		h.rt.fail(zombieErr(h.rt.cfg, err))
	}
}

// shutdown stops everything the run started, in order: tasks and workers
// first (the last barrier left them idle; nothing they could still produce
// would be committed), then the client, which aborts anything still open.
func (rt *runtime) shutdown() {
	rt.mu.Lock()
	tasks, restores := rt.tasks, rt.restores
	rt.tasks, rt.restores = map[pipeline.TaskID]*task{}, map[pipeline.TaskID]*restoring{}
	rt.mu.Unlock()
	for _, t := range tasks {
		t.stop()
	}
	for _, r := range restores {
		stopRestore(r)
	}
	for _, st := range rt.stages {
		if st != nil {
			st.stop()
		}
	}
	if rt.sink != nil {
		// Past the grace period the abort is not even tried: the client
		// closes at once and the broker aborts the transaction when this
		// transactional id next starts, or after transactions.timeout.
		ctx, cancel := context.WithTimeout(rt.hard, rt.cfg.Checkpoint.Timeout)
		defer cancel()
		rt.sink.Close(ctx)
	}
}

// errGraceOver fails the checkpoint that was still open when the shutdown
// grace period ended.
var errGraceOver = errors.New("the shutdown grace period ended before the checkpoint was done")

// grace bounds shutdown. Once it begins (Run's context is done, or the loop
// stopped by itself) the open checkpoint has checkpoint.timeout to commit
// or abort. Then hard is cancelled: produces waiting for room in a full
// buffer fail at once, and so does every wait of the checkpoint on the
// broker, so a broker that stopped answering cannot hold the process. The
// checkpoint is not committed; its records are read again by the next run.
type grace struct {
	hard  context.Context
	begin context.CancelFunc
	stop  context.CancelFunc
	done  chan struct{}
}

func startGrace(ctx context.Context, d time.Duration, log *slog.Logger) *grace {
	stopping, begin := context.WithCancel(ctx)
	hard, stop := context.WithCancel(context.WithoutCancel(ctx))
	g := &grace{hard: hard, begin: begin, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		select {
		case <-stopping.Done():
		case <-hard.Done():
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn("shutdown grace period over: the open checkpoint stops waiting for the broker and aborts", "checkpoint_timeout", d)
			stop()
		case <-hard.Done():
		}
	}()
	return g
}

// close ends the grace period's goroutine, once nothing uses hard.
func (g *grace) close() {
	g.begin()
	g.stop()
	<-g.done
}
