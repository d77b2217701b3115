package cli

import (
	"encoding/json"
	"errors"

	"github.com/pipeline-run/pipeline/config"
)

// formatFlag adds --format to c: text, for people, or json, one JSON
// document on stdout with the field names docs/operations.md lists, for
// scripts.
func (c *command) formatFlag() *string {
	return c.String("format", "text", "output `format`: text or json (fields in docs/operations.md)")
}

// jsonFormat checks a --format value and reports whether it is json.
func jsonFormat(format string) (bool, error) {
	switch format {
	case "text":
		return false, nil
	case "json":
		return true, nil
	}
	return false, usagef("--format %q: must be text or json", format)
}

// writeJSON writes v to stdout as one line of JSON.
func (e *env) writeJSON(v any) error {
	return json.NewEncoder(e.stdout).Encode(v)
}

// problem is one configuration problem in JSON: path and line are empty
// and 0 when the problem has none (a file that cannot be read).
type problem struct {
	Path    string `json:"path"`
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// problems lists the problems err reports, each with its path and line.
func problems(err error) []problem {
	var ce config.Errors
	var out []problem
	switch {
	case errors.As(err, &ce):
		for _, e := range ce {
			out = append(out, problem{Path: e.Path, Line: e.Line, Message: e.Msg})
		}
	default:
		out = append(out, problem{Message: err.Error()})
	}
	return out
}
