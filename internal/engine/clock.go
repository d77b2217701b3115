package engine

import "github.com/pipeline-run/pipeline/pipeline/state"

// WithClock measures state TTLs with c instead of the system clock: what
// expires, when an expired entry is removed and its tombstone written to
// the changelog. c is called from every task and the checkpoint
// coordinator at once, so it must be safe for concurrent use. Tests use it
// to move time by hand.
func WithClock(c state.Clock) Option { return func(p *Pipeline) { p.clock = c } }

// clock is the time state TTLs are measured with.
func (rt *runtime) clock() state.Clock {
	if rt.p.clock != nil {
		return rt.p.clock
	}
	return state.SystemClock
}
