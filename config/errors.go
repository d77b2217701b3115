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

// Reported reports whether a problem Parse returned with this partly
// filled Config covers path, so that a further check of it (the graph
// builder's) can leave out what was already said. A problem covers path
// when it is:
//   - at path or above it;
//   - below it, unless path is a top-level key: a problem at
//     "steps[1].name" covers "steps[1]", one at "sinks.out.topic" does
//     not cover "sinks";
//   - in a step that the `from` at path reads: that step's outputs are
//     not known;
//   - the sources section's own (none, or not a mapping), and path a
//     `from` left out, whose default would be the only source.
//
// It is false for every path of a Config that Parse accepted.
func (c *Config) Reported(path string) bool {
	if len(c.reported) == 0 {
		return false
	}
	if c.reported["sources"] && c.isFrom(path) && len(c.readsAt(path)) == 0 {
		return true
	}
	for p := path; p != ""; p = parentPath(p) {
		if c.reported[p] {
			return true
		}
	}
	if parentPath(path) != "" {
		for p := range c.reported {
			if under(p, path) {
				return true
			}
		}
	}
	for _, stream := range c.readsAt(path) {
		node, _, _ := strings.Cut(stream, ".")
		for _, st := range c.Steps {
			if (st.Name == stream || st.Name == node) && c.reportedUnder(st.Path) {
				return true
			}
		}
	}
	return false
}

// reportedUnder reports whether a problem was found at path or below it.
func (c *Config) reportedUnder(path string) bool {
	for p := range c.reported {
		if p == path || under(p, path) {
			return true
		}
	}
	return false
}

// under reports whether path p is below path above: "a.b" and "a[0]" are
// below "a", "ab" is not.
func under(p, above string) bool {
	rest, ok := strings.CutPrefix(p, above)
	return ok && rest != "" && (rest[0] == '.' || rest[0] == '[')
}

// isFrom reports whether path is the `from` of a step or a sink, or an
// item of one.
func (c *Config) isFrom(path string) bool {
	for _, st := range c.Steps {
		if path == st.Path+".from" || under(path, st.Path+".from") {
			return true
		}
	}
	for _, sk := range c.Sinks {
		if path == sk.Path+".from" {
			return true
		}
	}
	return false
}

// readsAt returns the streams named by the `from` at path: "steps[i].from",
// "steps[i].from[j]" or "sinks.<name>.from"; nil for any other path.
func (c *Config) readsAt(path string) []string {
	for _, st := range c.Steps {
		switch {
		case path == st.Path+".from":
			return st.From
		case under(path, st.Path+".from"):
			var j int
			if _, err := fmt.Sscanf(strings.TrimPrefix(path, st.Path+".from"), "[%d]", &j); err == nil && j >= 0 && j < len(st.From) {
				return st.From[j : j+1]
			}
		}
	}
	for _, sk := range c.Sinks {
		if path == sk.Path+".from" && sk.From != "" {
			return []string{sk.From}
		}
	}
	return nil
}
