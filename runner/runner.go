// Package runner runs a pipeline from Go: the front door for programs that
// embed the engine, with their own operators, instead of the pipeline
// command.
//
//	reg := ops.NewRegistry()           // the built-in operators
//	reg.Register("mask", maskDef{})    // and your own
//	cfg, err := runner.Load("pipeline.yaml", reg)
//	if err != nil {
//		return err // every problem, with its YAML path and line
//	}
//	p, err := runner.New(cfg, reg, runner.WithLogger(log))
//	...
//	err = p.Run(ctx) // until ctx is cancelled or a fatal error
//
// Load and New report the same problems, in the same order, as
// `pipeline validate` does.
package runner

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/state"
)

// Pipeline runs one configured graph: Run, Stats.
type Pipeline = engine.Pipeline

// Stats are the running totals of a pipeline.
type Stats = engine.Stats

// Checkpoint describes one finished checkpoint, committed or not.
type Checkpoint = engine.Checkpoint

// Option configures a Pipeline.
type Option = engine.Option

// Load reads the configuration file at path and checks it, the graph
// included, against the operators of reg (nil: the built-in ones). The
// error is config.Errors when the file has problems, each with its YAML
// path and line, sorted by line.
func Load(path string, reg *pipeline.Registry) (*config.Config, error) {
	cfg, err := config.Load(path)
	if _, err := engine.Check(cfg, err, reg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Parse is Load for a configuration held in memory; name is what errors
// call the file, and env looks up PIPELINE_* overrides (nil: the process
// environment).
func Parse(data []byte, name string, env func(string) (string, bool), reg *pipeline.Registry) (*config.Config, error) {
	cfg, err := config.Parse(data, name, env)
	if _, err := engine.Check(cfg, err, reg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// New builds the graph of cfg with the operators of reg (nil: the built-in
// ones). It does not touch the network.
func New(cfg *config.Config, reg *pipeline.Registry, opts ...Option) (*Pipeline, error) {
	return engine.New(cfg, reg, opts...)
}

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return engine.WithLogger(l) }

// WithSeedBrokers overrides the configured brokers.
func WithSeedBrokers(addrs ...string) Option { return engine.WithSeedBrokers(addrs...) }

// WithClientOpts adds franz-go options to the pipeline's clients, after
// the ones the configuration implies (hooks, for instance).
func WithClientOpts(opts ...kgo.Opt) Option { return engine.WithClientOpts(opts...) }

// WithCheckpointObserver calls fn after every checkpoint, committed or not,
// on the coordinator goroutine; fn must return quickly.
func WithCheckpointObserver(fn func(Checkpoint)) Option {
	return engine.WithCheckpointObserver(fn)
}

// WithClock sets the clock of state time-to-live (default: the system
// clock).
func WithClock(c state.Clock) Option { return engine.WithClock(c) }
