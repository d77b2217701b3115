package engine

import (
	"cmp"
	"errors"
	"slices"
	"strings"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
)

// Check is the one validation every front door uses (validate, run and the
// Go API): given what config.Load or config.Parse returned, it builds the
// graph so that operator and expression problems are found before anything
// runs. A file with configuration errors is still built as far as it was
// read, so that one pass shows every problem: the graph's are merged into
// the configuration's, leaving out those the configuration already
// reported, each with the line of its setting (or of the nearest enclosing
// one), sorted by line then path.
//
// It returns config.Errors for problems with the file, and loadErr itself
// when the file could not be read at all.
func Check(cfg *config.Config, loadErr error, reg *pipeline.Registry) (*Graph, error) {
	if loadErr == nil {
		// A configuration changed by hand since Parse is checked again:
		// the graph relies on the configuration's rules.
		loadErr = cfg.Validate()
	}
	var ce config.Errors
	switch {
	case loadErr == nil:
	case !errors.As(loadErr, &ce), cfg == nil:
		return nil, loadErr
	}
	g, err := Build(cfg, reg)
	var be config.Errors
	if err != nil && !errors.As(err, &be) {
		be = config.Errors{{Path: "steps", Msg: err.Error()}}
	}
	all := slices.Clone(ce)
	for _, b := range be {
		if b.Line == 0 {
			b.Line = cfg.NearestLine(b.Path)
		}
		if len(ce) == 0 || !cfg.Reported(b.Path) {
			all = append(all, b)
		}
	}
	if len(all) == 0 {
		return g, nil
	}
	slices.SortStableFunc(all, func(a, b *config.FieldError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Path, b.Path))
	})
	return nil, all
}
