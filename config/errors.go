package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// FieldError is one problem with one setting, named by its YAML path
// ("sinks.alerts.topic", "steps[2].map") and, when known, the line of the
// file it is on. A setting that came from an environment variable has no
// line; its Msg names the variable instead.
type FieldError struct {
	Path string
	Line int
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

// Errors is every problem found in a configuration. Load, Parse and
// Validate return it, sorted by line then path, so that one run shows the
// user all there is to fix.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns each *FieldError, for errors.As.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// sort orders es by line, then path; problems without a line come first.
func (es Errors) sort() {
	slices.SortStableFunc(es, func(a, b *FieldError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Path, b.Path))
	})
}
