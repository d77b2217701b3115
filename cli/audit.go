package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pipeline-run/pipeline/audit"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/twmb/franz-go/pkg/kgo"
)

// errAuditFailed makes `audit` exit 1 after it printed its findings.
var errAuditFailed = errors.New("audit found violations")

func (e *env) audit(ctx context.Context, args []string) error {
	fs := e.flags("audit")
	path := fs.String("c", "", "the pipeline's YAML `file`")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	if !cfg.Audit.Enabled {
		return usagef("audit.enabled is false: the pipeline writes no progress records to audit")
	}
	if cfg.Brokers.Embedded {
		return usagef("brokers: embedded: the embedded broker lives inside `pipeline run`; point brokers at a running broker")
	}
	base, err := pipeline.ClientOpts(cfg, nil, nil)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return err
	}
	defer cl.Close()
	spec := audit.Spec{Group: cfg.Group, Inputs: g.SourceTopics(), Outputs: g.OutputTopics(), Progress: cfg.Audit.Topic, TxnTimeout: cfg.Transactions.Timeout}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	r, err := audit.Run(ctx, cl, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: %d committed checkpoints, %d input records, %d output records accounted for\n",
		cfg.Name, r.Checkpoints, r.InputRecords, r.OutputRecords)
	for _, f := range r.Findings {
		fmt.Fprintf(e.stdout, "  %s\n", f)
	}
	if !r.OK() {
		return fmt.Errorf("%w: %d", errAuditFailed, len(r.Findings))
	}
	fmt.Fprintln(e.stdout, "ok: no input skipped or consumed twice, every output accounted for, no transaction hanging, offsets at the last checkpoint")
	return nil
}
