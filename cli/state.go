package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pipeline-run/pipeline/pipeline/state"
	"github.com/pipeline-run/pipeline/txsink"
	"github.com/pipeline-run/pipeline/wire"
)

// stateCmd runs `state reset`, which deletes one stateful step's state deliberately: its changelog
// topic and, with the pebble backend, its local stores. The pipeline must be
// stopped; it starts the step from empty state on its next run.
//
// The changelog is deleted once, for the whole cluster, but every instance
// keeps its own stores under its state.dir: the command must run against
// each. Only the first run finds the changelog; every run resets each task
// of the step it finds locally.
func (e *env) stateCmd(ctx context.Context, args []string) error {
	return e.group(ctx, "state", args, []subcommand{
		{"reset", "state reset -c FILE --step NAME",
			"Deletes one stateful step's state: its changelog topic and, with state.backend: pebble,\nits stores under state.dir. Stop every instance first.", e.stateReset},
	})
}

func (e *env) stateReset(ctx context.Context, fs *command, args []string) error {
	path := fs.String("c", "", "the pipeline's YAML `file`")
	step := fs.String("step", "", "the stateful step whose state to delete")
	if err := fs.parse(args); err != nil {
		return err
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	if !g.IsStateful(*step) {
		stateful := "this pipeline has no stateful step"
		if steps := g.StatefulSteps(); len(steps) > 0 {
			stateful = "the stateful steps of this pipeline are " + andList(steps)
		}
		if *step == "" {
			return usagef("state reset: --step is required: %s", stateful)
		}
		return usagef("state reset: --step %q is not a stateful step of this pipeline; %s", *step, strings.Replace(stateful, "the stateful steps of this pipeline", "its stateful steps", 1))
	}
	adm, err := e.adminFor(cfg)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	topic := wire.ChangelogTopic(cfg.Name, *step)
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return err
	}
	partitions := 0
	if d, ok := details[topic]; ok && d.Err == nil {
		partitions = len(d.Partitions)
		resp, err := adm.DeleteTopic(ctx, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("deleting the changelog %s: %w", topic, err)
		}
		fmt.Fprintf(e.stdout, "deleted changelog topic %s (%d partitions)\n", topic, partitions)
	} else {
		fmt.Fprintf(e.stdout, "changelog topic %s does not exist\n", topic)
	}
	if cfg.State.Backend != "pebble" {
		return nil
	}
	tasks, err := taskBound(ctx, adm, g.SourceTopics(), partitions, int(cfg.Topics.Partitions))
	if err != nil {
		return err
	}
	b, err := state.OpenPebble(cfg.State.Dir)
	if err != nil {
		return fmt.Errorf("state.dir (is the pipeline still running?): %w", err)
	}
	defer b.Close()
	name := cfg.Name + "/" + *step
	var reset []string
	for task := range int32(tasks) {
		has, err := hasState(b, name, task)
		if err == nil && has {
			err = state.Reset(b, name, task)
			reset = append(reset, strconv.Itoa(int(task)))
		}
		if err != nil {
			return fmt.Errorf("resetting task %d of step %s in %s: %w", task, *step, cfg.State.Dir, err)
		}
	}
	if len(reset) == 0 {
		fmt.Fprintf(e.stdout, "no local state of step %s in %s (tasks 0 to %d)\n", *step, cfg.State.Dir, tasks-1)
		return nil
	}
	fmt.Fprintf(e.stdout, "reset the local state of step %s in %s: tasks %s\n", *step, cfg.State.Dir, strings.Join(reset, ", "))
	return nil
}

// taskBound returns how many task numbers a step's local state can have:
// a task is a partition number of what the pipeline reads (its sources and
// repartition topics), and the changelog has one partition per task. A
// topic's partitions can only grow, so the largest count covers every task
// that ever ran, even when the changelog is gone.
func taskBound(ctx context.Context, adm *kadm.Client, sources []string, changelog, configured int) (int, error) {
	n := max(changelog, configured, 1)
	set, err := txsink.PartitionsOf(ctx, adm, sources...)
	if err != nil {
		return 0, fmt.Errorf("listing the partitions of %v: %w", sources, err)
	}
	for _, ps := range set {
		for p := range ps {
			n = max(n, int(p)+1)
		}
	}
	return n, nil
}

// probeFingerprint is no operator's: opening a store with it tells whether
// the store holds state (any state has a fingerprint) without reading it.
const probeFingerprint = "\x00state reset probe"

// hasState reports whether task of store name has local state in b.
func hasState(b state.Backend, name string, task int32) (bool, error) {
	st, err := state.Open(b, name, task, probeFingerprint, nil)
	var ie *state.IncompatibleError
	switch {
	case errors.As(err, &ie):
		return true, nil
	case err != nil:
		return false, err
	}
	defer st.Close()
	return st.AppliedOffset() >= 0, nil
}
