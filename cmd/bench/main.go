// Command bench measures the pipeline's throughput and latency side by side
// with a plain franz-go copy and franz-go's exactly-once copy loop, on one
// broker in one run. See docs/benchmarks.md and package bench.
//
//	go run ./cmd/bench -broker embedded|HOST:PORT -records 200000 -size 100,1024 \
//	    -partitions 1,6 -intervals 100ms,1s,5s -rounds 5 -arms all
//
// Exit status: 0 when every arm passed its correctness gate, 1 when one
// failed or the run could not finish, 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pipeline-run/pipeline/bench"
)

func main() {
	os.Exit(run())
}

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := bench.ParseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if err := bench.Run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if errors.Is(err, bench.ErrUsage) {
			return 2
		}
		return 1
	}
	return 0
}
