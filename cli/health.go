package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// health asks a running pipeline's probe endpoint, for container
// HEALTHCHECKs in images with no shell or curl: exit 0 when it answers ok.
func (e *env) health(ctx context.Context, args []string) error {
	c := e.command("health", "health [--addr HOST:PORT] [--ready]",
		"Asks a running pipeline's /healthz (or /readyz with --ready) on its metrics address and exits 0 when it answers ok, 1 otherwise, printing the reason. "+
			"The address defaults to PIPELINE_METRICS_LISTEN, then :9090, on this host.")
	addr := c.String("addr", "", "the metrics `address` (host:port, or :port for this host)")
	ready := c.Bool("ready", false, "ask /readyz instead of /healthz")
	if err := c.parse(args); err != nil {
		return err
	}
	a := *addr
	if a == "" {
		a = os.Getenv("PIPELINE_METRICS_LISTEN")
	}
	if a == "" {
		a = ":9090"
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return usagef("--addr %q: %v", a, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	fmt.Fprint(e.stdout, string(b))
	return nil
}
