// Package cli is the pipeline command line: run, validate, broker, offsets,
// transactions, audit, state, topics, produce, consume and version. It is a
// package rather than part of cmd/pipeline so that a Go user can build
// their own binary with their own operators:
//
//	func main() {
//		reg := ops.NewRegistry()
//		reg.Register("geoip", newGeoIP)
//		os.Exit(cli.Main(os.Args[1:], reg))
//	}
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/pipeline"
)

// Version is set at build time with -ldflags "-X github.com/pipeline-run/pipeline/cli.Version=...".
var Version = "dev"

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // the pipeline failed while running
	ExitUsage   = 2 // bad usage or bad configuration; nothing ran
)

// usageError marks errors that exit with ExitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// env is what a command runs with; tests replace the streams.
type env struct {
	reg    *pipeline.Registry
	stdin  io.Reader // nil reads nothing
	stdout io.Writer
	stderr io.Writer
	// progressEvery is the least time between two progress lines of a
	// long command; 0: its default.
	progressEvery time.Duration
}

const usage = `pipeline runs exactly-once Kafka-to-Kafka stream-processing pipelines.

Usage:
  pipeline run -c FILE [--log-level LEVEL]
                                   run the pipeline until SIGINT/SIGTERM
  pipeline validate -c FILE        check a configuration and print its graph
  pipeline broker --port N [--data-dir DIR] [--topics a,b --partitions P]
                                   run the embedded Kafka-protocol broker
  pipeline offsets show -c FILE    committed offsets and lag of the pipeline's group
  pipeline offsets reset -c FILE --to earliest|latest
                                   move the group's offsets (pipeline stopped)
  pipeline transactions hanging -c FILE [--abort]
                                   list (and abort) transactions left open on outputs
  pipeline audit -c FILE [--from X] [--to Y]
                                   check the pipeline's history against its topics
                                   (exit 0 only when every check holds)
  pipeline state reset -c FILE --step NAME
                                   delete one stateful step's state (pipeline stopped)
  pipeline topics list|create (-c FILE | --brokers ADDRS) ...
                                   list or create topics
  pipeline produce (-c FILE | --brokers ADDRS) --topic T [--file F]
                                   write records from JSON or raw lines
  pipeline consume (-c FILE | --brokers ADDRS) --topic T [--max N]
                                   print a topic's records as JSON lines
  pipeline health [--addr A] [--ready]
                                   ask a running pipeline's /healthz (or /readyz)
  pipeline version                 print the version

validate, offsets show, transactions hanging and audit take --format json.
pipeline COMMAND -h prints a command's help and flags.

Exit status: 0 ok, 1 runtime failure, 2 bad usage or configuration.
`

// Main runs the command line with args (without the program name) and the
// operators of reg, and returns the exit status.
func Main(args []string, reg *pipeline.Registry) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{reg: reg, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	return e.main(ctx, args)
}

func (e *env) main(ctx context.Context, args []string) int {
	err := e.dispatch(ctx, args)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	var ue usageError
	var ce config.Errors
	switch {
	case errors.As(err, &ue), errors.As(err, &ce):
		fmt.Fprintln(e.stderr, "pipeline:", indent(err.Error()))
		return ExitUsage
	}
	fmt.Fprintln(e.stderr, "pipeline:", indent(err.Error()))
	return ExitFailure
}

func (e *env) version(args []string) error {
	c := e.command("version", "version", "Prints the version of this binary, the commit it was built from and when, and the Go release that built it.")
	if err := c.parse(args); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, buildInfo())
	return nil
}

func indent(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	return "\n  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func (e *env) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return usagef("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return e.run(ctx, rest)
	case "validate":
		return e.validate(rest)
	case "broker":
		return e.broker(ctx, rest)
	case "offsets":
		return e.offsets(ctx, rest)
	case "transactions":
		return e.transactions(ctx, rest)
	case "audit":
		return e.audit(ctx, rest)
	case "state":
		return e.stateCmd(ctx, rest)
	case "topics":
		return e.topics(ctx, rest)
	case "produce":
		return e.produce(ctx, rest)
	case "consume":
		return e.consume(ctx, rest)
	case "version", "--version", "-version":
		return e.version(rest)
	case "health":
		return e.health(ctx, rest)
	case "help", "-h", "--help":
		fmt.Fprint(e.stdout, usage)
		return nil
	}
	fmt.Fprint(e.stderr, usage)
	return usagef("unknown command %q", cmd)
}

// loadConfig loads and validates the file, then builds the graph so that
// operator and expression errors are found before anything runs: one pass
// shows every problem (engine.Check).
func (e *env) loadConfig(path string) (*config.Config, *engine.Graph, error) {
	if path == "" {
		return nil, nil, usagef("-c FILE is required")
	}
	return e.checkConfig(config.Load(path))
}

// checkConfig is loadConfig after config.Load (or Parse) returned cfg and err.
func (e *env) checkConfig(cfg *config.Config, err error) (*config.Config, *engine.Graph, error) {
	g, err := engine.Check(cfg, err, e.reg)
	var ce config.Errors
	switch {
	case err == nil:
		return cfg, g, nil
	case errors.As(err, &ce):
		return nil, nil, err
	}
	return nil, nil, usageError{err}
}

func newLogger(w io.Writer, c config.Log, override string) *slog.Logger {
	level := slog.LevelInfo
	name := c.Level
	if override != "" {
		name = override
	}
	switch strings.ToLower(name) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
