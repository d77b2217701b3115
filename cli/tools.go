package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/config"
)

func (e *env) validate(args []string) error {
	fs := e.command("validate", "validate -c FILE [--format text|json]",
		"Checks a configuration as run does (environment overrides, operators and expressions\nincluded) without connecting to Kafka, and prints its graph. Every problem is\nreported with its YAML path and line; exit 2.")
	path := fs.String("c", "", "the pipeline's YAML `file`")
	format := fs.formatFlag()
	if err := fs.parse(args); err != nil {
		return err
	}
	asJSON, err := jsonFormat(*format)
	if err != nil {
		return err
	}
	cfg, g, _, err := e.loadRunConfig(*path)
	if asJSON {
		v := validation{Valid: err == nil, Errors: []problem{}}
		if err != nil {
			v.Errors = problems(err)
		} else {
			v.Name, v.Graph = &cfg.Name, new(g.Summary())
			v.SourceTopics, v.OutputTopics = g.SourceTopics(), g.OutputTopics()
		}
		if werr := e.writeJSON(v); werr != nil {
			return werr
		}
		return err
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: valid: %s\n", cfg.Name, g.Summary())
	return nil
}

// validation is validate's JSON output. Name, Graph and the topics are
// null when the file is not valid.
type validation struct {
	Name         *string   `json:"name"`
	Valid        bool      `json:"valid"`
	Graph        *string   `json:"graph"`
	SourceTopics []string  `json:"source_topics"`
	OutputTopics []string  `json:"output_topics"`
	Errors       []problem `json:"errors"`
}

func (e *env) broker(ctx context.Context, args []string) error {
	fs := e.command("broker", "broker [--port N] [--data-dir DIR] [--topics a,b --partitions P]",
		"Runs the embedded Kafka-protocol broker on 127.0.0.1 until SIGINT or SIGTERM,\nfor development and tests.")
	port := fs.Int("port", 9092, "port to listen on, on 127.0.0.1")
	dir := fs.String("data-dir", "", "persist to this `directory` (default: memory only)")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	parts := fs.Int("partitions", 1, "partitions of the topics created at start")
	txnMax := fs.Int("txn-max-timeout-ms", 0, "the broker's transaction.max.timeout.ms (default: Kafka's 900000)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := checkLevel(*level); err != nil {
		return err
	}
	if *port < 0 || *port > 65535 {
		return usagef("broker: --port %d is not a port", *port)
	}
	if *parts < 1 {
		return usagef("broker: --partitions must be at least 1")
	}
	var ts []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			ts = append(ts, t)
		}
	}
	log := newLogger(e.stderr, config.Log{Level: *level}, "")
	b, err := broker.Start(broker.Options{Port: *port, DataDir: *dir, Topics: ts, Partitions: int32(*parts), TxnMaxTimeoutMs: *txnMax, Logger: log})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "broker listening on %s\n", b.Addrs()[0])
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(e.stdout, "broker stopped")
	return nil
}
