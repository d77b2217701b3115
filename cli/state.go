package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// stateCmd runs `state reset`, which deletes one stateful step's state deliberately: its changelog
// topic and, with the pebble backend, its local stores. The pipeline must be
// stopped; it starts the step from empty state on its next run.
func (e *env) stateCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "reset" {
		return usagef("state: want `state reset -c FILE --step NAME`")
	}
	fs := e.flags("state reset")
	path := fs.String("c", "", "the pipeline's YAML `file`")
	step := fs.String("step", "", "the stateful step whose state to delete")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	if !g.IsStateful(*step) {
		return usagef("state reset: --step %q is not a stateful step of this pipeline (stateful: %v)", *step, g.StatefulSteps())
	}
	adm, err := e.adminFor(cfg)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	topic := pipeline.ChangelogTopic(cfg.Name, *step)
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
	if cfg.State.Backend == "pebble" {
		b, err := state.OpenPebble(cfg.State.Dir)
		if err != nil {
			return fmt.Errorf("state.dir (is the pipeline still running?): %w", err)
		}
		defer b.Close()
		for task := range max(partitions, 1) {
			if err := state.Reset(b, cfg.Name+"/"+*step, int32(task)); err != nil {
				return fmt.Errorf("resetting task %d of step %s in %s: %w", task, *step, cfg.State.Dir, err)
			}
		}
		fmt.Fprintf(e.stdout, "reset the local state of step %s in %s\n", *step, cfg.State.Dir)
	}
	return nil
}
