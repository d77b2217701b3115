package bench

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUsage marks a bad flag or argument: the command exits with status 2.
var ErrUsage = errors.New("usage")

// ErrFailed reports that at least one arm failed its correctness gate or
// did not finish; the tables say which.
var ErrFailed = errors.New("some arms FAILED")

// usageErrorf returns an error wrapping ErrUsage.
func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// GateError is a failed correctness gate: what the output topic held, read
// back read_committed, against what the arm had to write.
type GateError struct {
	Want       int64  // outputs expected
	Got        int64  // data records read
	Missing    int64  // expected seqs (windows, for a windowed arm) not found
	Duplicates int64  // records whose seq (window) was already seen
	Unexpected int64  // seqs the arm must not have written (filtered out or out of range; windows still open)
	Unreadable int64  // values without a seq (a window result's fields)
	Wrong      int64  // outputs whose value is not what their input must give (a keyed count off)
	Example    string // the first problem found, when the gate names one
}

func (e *GateError) Error() string {
	var parts []string
	add := func(n int64, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(e.Missing, "missing")
	add(e.Duplicates, "duplicated")
	add(e.Unexpected, "unexpected")
	add(e.Unreadable, "unreadable")
	add(e.Wrong, "with a wrong value")
	msg := fmt.Sprintf("gate: read %d of %d records: %s", e.Got, e.Want, strings.Join(parts, ", "))
	if e.Example != "" {
		msg += "; first: " + e.Example
	}
	return msg
}
