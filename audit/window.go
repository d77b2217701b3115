package audit

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Bound is one end of an audit window: a time or a checkpoint. The zero
// Bound leaves its end open.
type Bound struct {
	Time       time.Time // by the time a checkpoint's progress record was written, just before it committed
	Checkpoint string    // by commit order: "instance/run/id", as findings name checkpoints
}

// IsZero reports whether b leaves its end open.
func (b Bound) IsZero() bool { return b.Time.IsZero() && b.Checkpoint == "" }

func (b Bound) String() string {
	if b.Checkpoint != "" {
		return b.Checkpoint
	}
	if b.Time.IsZero() {
		return ""
	}
	return b.Time.Format(time.RFC3339Nano)
}

// checkpointRE is a checkpoint as findings name it: instance/run/id.
var checkpointRE = regexp.MustCompile(`^([A-Za-z0-9._-]+)/([A-Za-z0-9._-]+)/([0-9]+)$`)

// ParseBound reads a window end: an RFC 3339 time such as
// 2026-03-01T12:00:00Z (a zone is required), or a checkpoint as findings
// and progress records name it, instance/run/id.
func ParseBound(s string) (Bound, error) {
	if m := checkpointRE.FindStringSubmatch(s); m != nil {
		if id, err := strconv.ParseUint(m[3], 10, 64); err != nil || id == 0 {
			return Bound{}, fmt.Errorf("%q: a checkpoint id is a whole number from 1", s)
		}
		return Bound{Checkpoint: s}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Bound{}, fmt.Errorf("%q is neither an RFC 3339 time such as 2026-03-01T12:00:00Z nor a checkpoint instance/run/id such as i1/9f86d081884c7d65/42", s)
	}
	return Bound{Time: t}, nil
}

// Window bounds an audit to the checkpoints committed within it, both ends
// included, and to the input ranges they consumed and the outputs of those
// inputs. The zero Window audits the whole history.
type Window struct {
	From, To Bound
}

// IsZero reports whether w audits the whole history.
func (w Window) IsZero() bool { return w.From.IsZero() && w.To.IsZero() }

func (w Window) String() string {
	if w.IsZero() {
		return "the whole history"
	}
	from, to := w.From.String(), w.To.String()
	if from == "" {
		from = "the first checkpoint"
	}
	if to == "" {
		to = "the last"
	}
	return "from " + from + " to " + to
}

// Check reports what can be told wrong with w without reading anything:
// two times in the wrong order.
func (w Window) Check() error {
	if !w.From.Time.IsZero() && !w.To.Time.IsZero() && w.From.Time.After(w.To.Time) {
		return &WindowError{End: "from", Bound: w.From, Msg: "is after --to " + w.To.String()}
	}
	return nil
}

// WindowError is a window end that cannot be used: a checkpoint that never
// committed, ends in the wrong order, or a window holding no checkpoint.
type WindowError struct {
	End   string // "from" or "to"
	Bound Bound
	Msg   string
}

func (e *WindowError) Error() string { return e.End + " " + e.Bound.String() + ": " + e.Msg }

// resolve marks the checkpoints within w. cps are the committed
// checkpoints of the group, in commit order.
func (w Window) resolve(cps []*checkpoint) error {
	order := func(end string, b Bound) (int, error) {
		for _, cp := range cps {
			if cp.id == b.Checkpoint {
				return cp.order, nil
			}
		}
		hint := "the progress topic holds no committed checkpoint of this pipeline"
		if len(cps) > 0 {
			hint = fmt.Sprintf("no committed checkpoint of this pipeline has that id (the first is %s, the last %s)", cps[0].id, cps[len(cps)-1].id)
		}
		return 0, &WindowError{End: end, Bound: b, Msg: hint}
	}
	from, to := -1, -1
	var err error
	if w.From.Checkpoint != "" {
		if from, err = order("from", w.From); err != nil {
			return err
		}
	}
	if w.To.Checkpoint != "" {
		if to, err = order("to", w.To); err != nil {
			return err
		}
	}
	if from >= 0 && to >= 0 && from > to {
		return &WindowError{End: "from", Bound: w.From, Msg: "committed after --to " + w.To.String()}
	}
	n := 0
	for _, cp := range cps {
		cp.in = true
		switch {
		case from >= 0 && cp.order < from, to >= 0 && cp.order > to:
			cp.in = false
		case !w.From.Time.IsZero() && cp.time.Before(w.From.Time), !w.To.Time.IsZero() && cp.time.After(w.To.Time):
			cp.in = false
		}
		if cp.in {
			n++
		}
	}
	if n == 0 && !w.IsZero() {
		what := "the progress topic holds no committed checkpoint of this pipeline"
		if len(cps) > 0 {
			what = fmt.Sprintf("none of the %d committed checkpoints is within it (the first, %s, at %s; the last, %s, at %s)", len(cps),
				cps[0].id, cps[0].time.UTC().Format(time.RFC3339), cps[len(cps)-1].id, cps[len(cps)-1].time.UTC().Format(time.RFC3339))
		}
		end, b := "from", w.From
		if w.From.IsZero() {
			end, b = "to", w.To
		}
		return &WindowError{End: end, Bound: b, Msg: "no committed checkpoint lies in the window " + w.String() + ": " + what}
	}
	return nil
}
