package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
)

func (e *env) run(ctx context.Context, args []string) error {
	fs := e.command("run", "run -c FILE [--log-level LEVEL]",
		"Runs the pipeline until SIGINT or SIGTERM, then finishes or aborts the open checkpoint\nand exits 0. With a demo: section, it ends by itself once the demo is processed.")
	path := fs.String("c", "", "the pipeline's YAML `file`")
	level := fs.String("log-level", "", "override log.level: debug, info, warn or error")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := checkLevel(*level); err != nil {
		return err
	}
	cfg, _, crash, err := e.loadRunConfig(*path)
	if err != nil {
		return err
	}
	log := newLogger(e.stderr, cfg.Log, *level)

	var cps checkpointLog
	var m *metrics
	var p *engine.Pipeline
	var ln net.Listener
	if cfg.Metrics.Listen != "" {
		// Listen before anything runs: a taken port is a configuration
		// error, not something to find out later.
		if ln, err = net.Listen("tcp", cfg.Metrics.Listen); err != nil {
			return usagef("metrics.listen: %v", err)
		}
		defer ln.Close()
		m = newMetrics(func() engine.Stats { return p.Stats() })
		m.health = func(now time.Time) engine.Health {
			if p == nil {
				return engine.Health{Live: true, Reason: "starting"}
			}
			return p.Health(now)
		}
	}

	var seeds []string
	if cfg.Brokers.Embedded {
		b, err := broker.Start(broker.Options{Port: cfg.Embedded.Port, Logger: log})
		if err != nil {
			if cfg.Embedded.Port > 0 {
				// A taken port is the file's to fix, as metrics.listen's is.
				return usagef("embedded.port: %v", err)
			}
			return err
		}
		defer b.Close()
		seeds = b.Addrs()
		log.Info("embedded broker started", "addr", seeds[0])
		// Before the pipeline's start-up checks, which want its
		// sources' topics to exist.
		if err := createConfigured(ctx, cfg, seeds, log); err != nil {
			return err
		}
	} else if len(cfg.Topics.Create) > 0 {
		log.Warn("topics.create is for the embedded broker; its topics are not created on these brokers", "topics", len(cfg.Topics.Create))
	}

	var demo *demoRun
	if cfg.Demo.Topic != "" {
		if demo, err = newDemo(ctx, cfg, seeds, log); err != nil {
			return err
		}
		defer demo.close()
	}

	opts := []engine.Option{crash, engine.WithLogger(log), engine.WithSeedBrokers(seeds...)}
	if m != nil {
		opts = append(opts, engine.WithClientOpts(m.clientHooks()))
	}
	p, err = engine.New(cfg, e.reg, append(opts,
		engine.WithCheckpointObserver(func(cp engine.Checkpoint) {
			cps.add(cp)
			if m != nil {
				m.observe(cp)
			}
		}),
	)...)
	if err != nil {
		return err
	}
	if m != nil {
		m.watch(p, cfg.Transactions.Timeout, log)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	start := time.Now()
	g.Go(func() error { return p.Run(runCtx) })
	if m != nil {
		g.Go(func() error { return m.serve(gctx, ln, log) })
	}
	var demoDone atomic.Bool
	if demo != nil {
		g.Go(func() error {
			// The demo ends by itself: once every record it wrote has
			// been committed by the pipeline, stop it.
			if err := demo.feedAndWait(gctx, cfg.Group, p.Graph().SourceTopics()); err != nil {
				if gctx.Err() != nil {
					return nil
				}
				return err
			}
			demoDone.Store(true)
			cancel()
			return nil
		})
	}
	err = g.Wait()
	elapsed := time.Since(start)
	if err != nil {
		return err
	}
	if demo != nil {
		// Stopped by a signal before the demo was done is a clean stop
		// like any other: report what was committed, and exit 0.
		stopped := !demoDone.Load() && ctx.Err() != nil
		return demo.report(context.WithoutCancel(ctx), e.stdout, cfg, p.Graph().OutputTopics(), p.Stats(), &cps, elapsed, stopped)
	}
	return nil
}

// checkpointLog keeps the figures of every checkpoint for the summary.
type checkpointLog struct {
	mu        sync.Mutex
	durations []time.Duration
	commits   []time.Duration
}

func (c *checkpointLog) add(cp engine.Checkpoint) {
	if !cp.Committed || cp.Records == 0 {
		return
	}
	c.mu.Lock()
	c.durations = append(c.durations, cp.Duration)
	c.commits = append(c.commits, cp.Commit)
	c.mu.Unlock()
}

func (c *checkpointLog) percentiles() (p50, p99, max time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.commits) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(c.commits)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99)/100], s[len(s)-1]
}

// loadRunConfig is loadConfig for run and validate, which also check
// PIPELINE_CRASH_AT, the crash drill run reads, and report a bad value
// with the configuration's other problems. It returns the drill's option.
func (e *env) loadRunConfig(path string) (*config.Config, *engine.Graph, engine.Option, error) {
	cfg, g, err := e.loadConfig(path)
	crash, cerr := crashPoint(os.Getenv(crashVar))
	if cerr == nil {
		return cfg, g, crash, err
	}
	var ce config.Errors
	switch {
	case err == nil:
		return nil, nil, nil, config.Errors{cerr}
	case errors.As(err, &ce):
		// Without a line, it sorts first, with the other variables'.
		return nil, nil, nil, append(config.Errors{cerr}, ce...)
	}
	return nil, nil, nil, err
}

const crashVar = "PIPELINE_CRASH_AT"

// crashPoint reads PIPELINE_CRASH_AT, a fault drill: "POINT:N" makes the
// process SIGKILL itself at POINT (before-commit or after-commit) of the
// N-th checkpoint that read records. Empty: no drill.
func crashPoint(spec string) (engine.Option, *config.FieldError) {
	if spec == "" {
		return func(*engine.Pipeline) {}, nil
	}
	point, nth, ok := strings.Cut(spec, ":")
	n, err := strconv.Atoi(nth)
	if !ok || err != nil || n < 1 || (point != string(engine.BeforeCommit) && point != string(engine.AfterCommit)) {
		return nil, &config.FieldError{Path: crashVar, Msg: fmt.Sprintf("%q is not a crash point: want before-commit:N or after-commit:N, N from 1", spec)}
	}
	seen := 0
	return engine.WithFaultPoint(func(at engine.FaultPoint, cp engine.Checkpoint) {
		if string(at) != point {
			return
		}
		if seen++; seen == n {
			fmt.Fprintf(os.Stderr, "PIPELINE_CRASH_AT: crashing at %s of checkpoint %d\n", at, cp.ID)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}), nil
}
