package cli

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/pipeline"
	"golang.org/x/sync/errgroup"
)

func (e *env) run(ctx context.Context, args []string) error {
	fs := e.flags("run")
	path := fs.String("c", "", "the pipeline's YAML `file`")
	level := fs.String("log-level", "", "override log.level (debug, info, warn, error)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, _, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	log := newLogger(e.stderr, cfg.Log, *level)

	var cps checkpointLog
	var m *metrics
	var p *pipeline.Pipeline
	var ln net.Listener
	if cfg.Metrics.Listen != "" {
		// Listen before anything runs: a taken port is a configuration
		// error, not something to find out later.
		if ln, err = net.Listen("tcp", cfg.Metrics.Listen); err != nil {
			return usagef("metrics.listen: %v", err)
		}
		defer ln.Close()
		m = newMetrics(func() pipeline.Stats { return p.Stats() })
	}

	var seeds []string
	if cfg.Brokers.Embedded {
		b, err := broker.Start(broker.Options{Logger: log})
		if err != nil {
			return err
		}
		defer b.Close()
		seeds = b.Addrs()
		log.Info("embedded broker started", "addr", seeds[0])
	}

	var demo *demoRun
	if cfg.Demo.Topic != "" {
		if demo, err = newDemo(ctx, cfg, seeds, log); err != nil {
			return err
		}
		defer demo.close()
	}

	p, err = pipeline.New(cfg, e.reg,
		pipeline.WithLogger(log),
		pipeline.WithSeedBrokers(seeds...),
		pipeline.WithCheckpointObserver(func(cp pipeline.Checkpoint) {
			cps.add(cp)
			if m != nil {
				m.observe(cp)
			}
		}),
	)
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(runCtx)
	start := time.Now()
	g.Go(func() error { return p.Run(runCtx) })
	if m != nil {
		g.Go(func() error { return m.serve(gctx, ln, log) })
	}
	if demo != nil {
		g.Go(func() error {
			// The demo ends by itself: once every record it wrote has
			// been committed by the pipeline, stop it.
			if err := demo.feedAndWait(gctx, cfg.Group); err != nil {
				if gctx.Err() != nil {
					return nil
				}
				return err
			}
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
		return demo.report(context.WithoutCancel(ctx), e.stdout, cfg, p.Stats(), &cps, elapsed)
	}
	return nil
}

// checkpointLog keeps the figures of every checkpoint for the summary.
type checkpointLog struct {
	mu        sync.Mutex
	durations []time.Duration
	commits   []time.Duration
}

func (c *checkpointLog) add(cp pipeline.Checkpoint) {
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
