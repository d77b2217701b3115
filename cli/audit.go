package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pipeline-run/pipeline/audit"
)

// errAuditFailed makes `audit` exit 1 after it printed its findings.
var errAuditFailed = errors.New("audit found violations")

func (e *env) audit(ctx context.Context, args []string) error {
	fs := e.command("audit", "audit -c FILE [--from BOUND] [--to BOUND] [--format text|json]",
		"Checks the pipeline's committed history against its topics and the group's offsets;\nexits 0 only when every check holds. Run it on a stopped pipeline.")
	path := fs.String("c", "", "the pipeline's YAML `file`")
	timeout := fs.duration("timeout", 5*time.Minute, "give up after this `duration`")
	from := fs.String("from", "", "audit only checkpoints committed from this `bound` on: an RFC 3339 time (2026-03-01T12:00:00Z) or a checkpoint instance/run/id")
	to := fs.String("to", "", "audit only checkpoints committed up to this `bound`, included: an RFC 3339 time or a checkpoint instance/run/id")
	format := fs.formatFlag()
	if err := fs.parse(args); err != nil {
		return err
	}
	asJSON, err := jsonFormat(*format)
	if err != nil {
		return err
	}
	var w audit.Window
	for _, b := range []struct {
		flag string
		val  string
		into *audit.Bound
	}{{"from", *from, &w.From}, {"to", *to, &w.To}} {
		if b.val == "" {
			continue
		}
		bound, err := audit.ParseBound(b.val)
		if err != nil {
			return usagef("--%s: %v", b.flag, err)
		}
		*b.into = bound
	}
	if err := w.Check(); err != nil {
		return windowUsage(err)
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	if !cfg.Audit.Enabled {
		return usagef("audit.enabled is false: the pipeline writes no progress records to audit")
	}
	cl, err := e.clientFor(cfg) // the audit's reads choose their isolation
	if err != nil {
		return err
	}
	defer cl.Close()
	spec := audit.Spec{Group: cfg.Group, Inputs: g.SourceTopics(), Outputs: g.OutputTopics(), Progress: cfg.Audit.Topic,
		TxnTimeout: cfg.Transactions.Timeout, DeadLetter: cfg.DeadLetter.Topic, Window: w,
		StartLatest: cfg.Consumer.StartFrom == "latest"}
	if cfg.Audit.SourcePositions {
		for _, s := range cfg.Sinks {
			spec.Positioned = append(spec.Positioned, s.Topic)
		}
	}
	spec.OnRead = e.auditProgress()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	r, err := audit.Run(ctx, cl, spec)
	if err != nil {
		return windowUsage(err)
	}
	if asJSON {
		if err := e.writeJSON(newAuditJSON(cfg.Name, w, len(spec.Positioned) > 0, r)); err != nil {
			return err
		}
		if !r.OK() {
			return fmt.Errorf("%w: %d", errAuditFailed, len(r.Findings))
		}
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: %d committed checkpoints, %d input records, %d output records accounted for\n",
		cfg.Name, r.Checkpoints, r.InputRecords, r.OutputRecords)
	if !w.IsZero() {
		fmt.Fprintf(e.stdout, "window: %s\n", w)
	}
	if len(spec.Positioned) > 0 {
		fmt.Fprintf(e.stdout, "source positions: %d outputs of %d inputs checked one by one\n", r.Sourced, r.Sources)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(e.stdout, "  %s\n", f)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(e.stdout, "note: %s\n", n)
	}
	if !r.OK() {
		return fmt.Errorf("%w: %d", errAuditFailed, len(r.Findings))
	}
	ok := "ok: no input skipped or consumed twice, every output accounted for, no transaction hanging, offsets at the last checkpoint"
	if len(spec.Positioned) > 0 {
		ok += ", each input's outputs written once, by the transaction that consumed it"
	}
	fmt.Fprintln(e.stdout, ok)
	return nil
}

// auditJSON is audit's JSON output. Window is null for the whole history;
// the sourced counts are null without audit.source_positions.
type auditJSON struct {
	Name           string        `json:"name"`
	OK             bool          `json:"ok"`
	Checkpoints    int           `json:"checkpoints"`
	InputRecords   int64         `json:"input_records"`
	OutputRecords  int64         `json:"output_records"`
	Window         *string       `json:"window"`
	SourcedOutputs *int64        `json:"sourced_outputs"`
	SourcedInputs  *int64        `json:"sourced_inputs"`
	Findings       []findingJSON `json:"findings"`
	Notes          []string      `json:"notes"`
}

type findingJSON struct {
	Check  string `json:"check"`
	Where  string `json:"where"`
	Detail string `json:"detail"`
}

func newAuditJSON(name string, w audit.Window, positioned bool, r *audit.Report) auditJSON {
	out := auditJSON{Name: name, OK: r.OK(), Checkpoints: r.Checkpoints, InputRecords: r.InputRecords, OutputRecords: r.OutputRecords,
		Findings: []findingJSON{}, Notes: append([]string{}, r.Notes...)}
	if !w.IsZero() {
		out.Window = new(w.String())
	}
	if positioned {
		out.SourcedOutputs, out.SourcedInputs = &r.Sourced, &r.Sources
	}
	for _, f := range r.Findings {
		out.Findings = append(out.Findings, findingJSON{Check: string(f.Check), Where: f.Where, Detail: f.Detail})
	}
	return out
}

// progressEvery is the least time between two of audit's progress lines.
const progressEvery = 2 * time.Second

// auditProgress returns what tells the user on stderr how far an audit
// has read: at once, then at most once per progressEvery (or
// e.progressEvery), so that a long audit is seen to be working.
func (e *env) auditProgress() func(audit.Reading) {
	every := cmp.Or(e.progressEvery, progressEvery)
	var last time.Time
	return func(r audit.Reading) {
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < every {
			return
		}
		last = now
		what := r.What + " " + r.Topic
		if r.What == "progress" {
			what = "the progress topic " + r.Topic
		}
		pct := int64(100)
		if r.Total > 0 {
			pct = r.Done * 100 / r.Total
		}
		fmt.Fprintf(e.stderr, "audit: reading %s (topic %d of %d): %d of %d offsets (%d%%)\n", what, r.Index, r.Topics, r.Done, r.Total, pct)
	}
}

// windowUsage makes a window end that cannot be used a usage error naming
// its flag; other errors pass through.
func windowUsage(err error) error {
	var we *audit.WindowError
	if errors.As(err, &we) {
		return usagef("--%s %s: %s", we.End, we.Bound, we.Msg)
	}
	return err
}
