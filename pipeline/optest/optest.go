// Package optest tests operators without a broker: Context is a
// pipeline.Context that records what an operator emits, so a test can call
// Process (and Flush) directly and look at the records that came out.
//
//	ctx := optest.NewContext(t)
//	r := &pipeline.Record{Value: pipeline.RawValue([]byte(`{"email":"a@b"}`), pipeline.JSON)}
//	if err := op.Process(ctx, r); err != nil { ... }
//	out := ctx.Emitted("") // the default output
package optest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
)

// Emitted is one record an operator emitted, and the output it went to
// ("" for the default output).
type Emitted struct {
	Output string
	Record *pipeline.Record
}

// Context is a pipeline.Context for tests. Its context.Context is the
// test's, done when the test ends; its task and input are 0 unless set.
type Context struct {
	context.Context
	TaskID pipeline.TaskID
	In     int
	Log    *slog.Logger
	// WM is what Watermark returns: set it to drive an operator that
	// uses event time.
	WM time.Time
	// Clock is what Now returns; the wall clock when zero.
	Clock time.Time
	// Late holds the records dropped with DropLate.
	Late []*pipeline.Record

	eval pipeline.Evaluator
	out  []Emitted
}

// NewContext returns a Context whose context ends with t and whose logger
// discards.
func NewContext(t testing.TB) *Context {
	return &Context{Context: t.Context(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// Task returns c.TaskID.
func (c *Context) Task() pipeline.TaskID { return c.TaskID }

// Input returns c.In.
func (c *Context) Input() int { return c.In }

// Eval returns the context's expression evaluator.
func (c *Context) Eval() *pipeline.Evaluator { return &c.eval }

// Logger returns c.Log.
func (c *Context) Logger() *slog.Logger { return c.Log }

// Watermark returns c.WM.
func (c *Context) Watermark() time.Time { return c.WM }

// Now returns c.Clock, or the wall clock when it is zero.
func (c *Context) Now() time.Time {
	if c.Clock.IsZero() {
		return time.Now()
	}
	return c.Clock
}

// DropLate records r in c.Late.
func (c *Context) DropLate(r *pipeline.Record) { c.Late = append(c.Late, r) }

// Emit records r as sent to the default output.
func (c *Context) Emit(r *pipeline.Record) { c.out = append(c.out, Emitted{Record: r}) }

// EmitTo records r as sent to output.
func (c *Context) EmitTo(output string, r *pipeline.Record) {
	c.out = append(c.out, Emitted{Output: output, Record: r})
}

// All returns every record emitted so far, in order, with its output.
func (c *Context) All() []Emitted { return c.out }

// Emitted returns the records emitted so far to output ("" for the
// default output), in order.
func (c *Context) Emitted(output string) []*pipeline.Record {
	var rs []*pipeline.Record
	for _, e := range c.out {
		if e.Output == output {
			rs = append(rs, e.Record)
		}
	}
	return rs
}

// Reset forgets what was emitted.
func (c *Context) Reset() { c.out = c.out[:0] }

var _ pipeline.Context = (*Context)(nil)
