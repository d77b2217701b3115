package pipeline

import (
	"errors"
	"fmt"
	"strings"
)

// ErrStopped is returned by Run when the pipeline was asked to stop and
// stopped cleanly.
var ErrStopped = errors.New("pipeline stopped")

// ErrZombie is returned when another live instance uses our instance id: the
// broker fenced this one. Restarting it would only fence the other in turn,
// so the process must exit.
var ErrZombie = errors.New("fenced by another instance with the same instance_id")

// DecodeError says a key or value could not be decoded in its format.
type DecodeError struct{ Err error }

func (e *DecodeError) Error() string { return "decoding: " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// RecordError is a failure to process one input record: it names the step
// and the record's source position. Records failing this way go to the
// dead-letter topic when there is one.
type RecordError struct {
	Step     string // the node that failed
	Path     string // its YAML path
	Position Position
	Err      error
}

func (e *RecordError) Error() string {
	where := e.Step
	if e.Path != "" {
		where = fmt.Sprintf("%s (%s)", e.Step, e.Path)
	}
	return fmt.Sprintf("record %s: step %s: %v", e.Position, where, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// BuildError is one problem found while building the graph from config,
// named by its YAML path.
type BuildError struct {
	Path string
	Line int
	Msg  string
}

func (e *BuildError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

// BuildErrors is every problem found while building the graph.
type BuildErrors []*BuildError

func (es BuildErrors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func (es BuildErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
