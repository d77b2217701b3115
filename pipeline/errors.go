package pipeline

import "fmt"

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
