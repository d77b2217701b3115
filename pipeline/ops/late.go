package ops

import (
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// lateData is what a step on event time does with a record that came too
// late: true sends it to the step's late output, false counts and drops it.
type lateData bool

// parseLate reads a step's late setting ("" or drop, or output).
func parseLate(s *pipeline.Spec, v string) lateData {
	switch v {
	case "", "drop":
	case "output":
		return true
	default:
		s.Errorf(".late", "must be drop (the default: count and log late records) or output (send them to %s.late), found %q", s.Name, v)
	}
	return false
}

// outputs is the step's named outputs: late, when it has one.
func (l lateData) outputs() []string {
	if l {
		return []string{"late"}
	}
	return nil
}

// send handles late record r.
func (l lateData) send(ctx pipeline.Context, r *pipeline.Record) {
	if l {
		ctx.EmitTo("late", r)
		return
	}
	ctx.DropLate(r)
}

// joinState registers the state of the join steps: buffered records (a map
// per key) and their timers.
func joinState(st *state.Store) (*state.Map[joinEntry], *state.Timers, error) {
	buf, err := state.NewMap[joinEntry](st, "records", state.TTLConfig{}, state.WithCodec[joinEntry](joinEntryCodec{}))
	if err != nil {
		return nil, nil, err
	}
	tm, err := state.NewTimers(st, "timers")
	if err != nil {
		return nil, nil, err
	}
	return buf, tm, nil
}
