package cli

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
)

// target is where a command that needs no pipeline connects: the brokers
// of a pipeline's file (with its TLS and SASL settings), or those of
// --brokers, which win.
type target struct {
	path    *string
	brokers *string
}

func (c *command) targetFlags() target {
	return target{
		path:    c.String("c", "", "connect as the pipeline of this YAML `file` does (brokers, TLS, SASL)"),
		brokers: c.String("brokers", "", "connect to these `host:port` addresses, comma-separated (over the file's brokers)"),
	}
}

// connect returns a client of the target's cluster, once a broker answers.
func (e *env) connect(ctx context.Context, t target, opts ...kgo.Opt) (*kgo.Client, error) {
	cfg := &config.Config{Name: "tools"}
	if *t.path != "" {
		c, _, err := e.loadConfig(*t.path)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	var seeds []string
	switch {
	case *t.brokers != "":
		for _, a := range strings.Split(*t.brokers, ",") {
			a = strings.TrimSpace(a)
			if !isAddr(a) {
				return nil, usagef("--brokers: %q is not a host:port address", a)
			}
			seeds = append(seeds, a)
		}
	case *t.path == "":
		return nil, usagef("-c FILE or --brokers host:port is required: where is the cluster?")
	default:
		var err error
		if seeds, err = seedsOf(cfg); err != nil {
			return nil, err
		}
	}
	return dial(ctx, cfg, seeds, opts...)
}

// dial connects a client to seeds with cfg's TLS and SASL settings and
// checks that one of them answers.
func dial(ctx context.Context, cfg *config.Config, seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	base, err := engine.ClientOpts(cfg, seeds, nil)
	if err != nil {
		return nil, err
	}
	if err := engine.DialCheck(ctx, seeds, 0); err != nil {
		return nil, err
	}
	return kgo.NewClient(append(base, opts...)...)
}

// seedsOf returns where cfg's brokers are. With brokers: embedded, that is
// the broker inside a running `pipeline run`, which other commands reach
// only at a port the file sets.
func seedsOf(cfg *config.Config) ([]string, error) {
	if !cfg.Brokers.Embedded {
		return cfg.Brokers.Addrs, nil
	}
	if cfg.Embedded.Port == 0 {
		return nil, usagef("brokers: embedded: the embedded broker lives inside `pipeline run`, on a port of its choosing; " +
			"set embedded.port (or PIPELINE_EMBEDDED_PORT) to reach it while the run lasts, pass --brokers with the address the run logs, " +
			"or run `pipeline broker` and point brokers at it")
	}
	return []string{embeddedAddr(cfg.Embedded.Port)}, nil
}

func embeddedAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// clientFor connects a client reading committed data to the pipeline's
// cluster.
func (e *env) clientFor(cfg *config.Config) (*kgo.Client, error) {
	seeds, err := seedsOf(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return dial(ctx, cfg, seeds, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
}

// adminFor is clientFor for an admin client; closing it closes the client.
func (e *env) adminFor(cfg *config.Config) (*kadm.Client, error) {
	cl, err := e.clientFor(cfg)
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

// isAddr reports whether a is host:port with a port from 1 to 65535.
func isAddr(a string) bool {
	host, port, err := net.SplitHostPort(a)
	n, perr := strconv.Atoi(port)
	return err == nil && host != "" && perr == nil && n > 0 && n <= 65535
}
