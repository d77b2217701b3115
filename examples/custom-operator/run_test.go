package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/runner"
)

// start runs cfg on the brokers addrs, with the built-in operators and
// kind made by f, as a new process would. stop ends the run and fails the
// test if it ended with an error.
func start(ctx context.Context, t *testing.T, cfg *config.Config, addrs []string, kind string, f pipeline.Factory) (p *runner.Pipeline, stop func()) {
	t.Helper()
	reg := ops.NewRegistry()
	if err := reg.Register(kind, f); err != nil {
		t.Fatal(err)
	}
	p, err := runner.New(cfg, reg, runner.WithSeedBrokers(addrs...),
		runner.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	return p, func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
}
