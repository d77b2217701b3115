package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/internal/testkit"
)

// TestProbesAnswerFromTheHealth: /healthz and /readyz on the metrics
// address answer 200 or 503 with the reason, as the pipeline's health says.
func TestProbesAnswerFromTheHealth(t *testing.T) {
	var cur atomic.Value
	cur.Store(engine.Health{Live: true, Reason: "starting"})
	m := newMetrics(func() engine.Stats { return engine.Stats{} })
	m.health = func(time.Time) engine.Health { return cur.Load().(engine.Health) }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.serve(ctx, ln, testkit.Logger(t)) }()
	defer func() { cancel(); <-done }()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, tc := range []struct {
		h             engine.Health
		live, ready   int
		liveB, readyB string
	}{
		{engine.Health{Live: true, Reason: "starting"}, 200, 503, "ok", "starting"},
		{engine.Health{Live: true, Ready: true}, 200, 200, "ok", "ok"},
		{engine.Health{Live: true, Reason: "2 tasks restoring their state"}, 200, 503, "ok", "2 tasks restoring their state"},
		{engine.Health{Reason: "no checkpoint finished for 3m0s"}, 503, 503, "no checkpoint finished for 3m0s", "no checkpoint finished for 3m0s"},
	} {
		cur.Store(tc.h)
		if code, body := get("/healthz"); code != tc.live || body != tc.liveB {
			t.Errorf("%+v: /healthz %d %q", tc.h, code, body)
		}
		if code, body := get("/readyz"); code != tc.ready || body != tc.readyB {
			t.Errorf("%+v: /readyz %d %q", tc.h, code, body)
		}
	}
	if code, _ := get("/metrics"); code != 200 {
		t.Errorf("/metrics: %d", code)
	}
}

// TestRunServesProbes runs the quick start with a metrics address and
// checks that /healthz and /readyz say ok while it runs, and /metrics
// names the build.
func TestRunServesProbes(t *testing.T) {
	data, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	body := strings.Replace(string(data), "records: 20000", "records: 30000", 1)
	body = strings.Replace(body, "rate: 10000 ", "rate: 5000 ", 1)
	body += "metrics: {listen: \"" + addr + "\"}\n"
	done := make(chan int, 1)
	go func() {
		code, _, _ := runCLI(t, "run", "-c", writeFile(t, body))
		done <- code
	}()
	seen := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < 3 && time.Now().Before(deadline) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && (path != "/metrics" || strings.Contains(string(b), "pipeline_build_info{")) {
				seen[path] = true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d", code)
	}
	if len(seen) < 3 {
		t.Fatalf("only %v answered ok during the run", seen)
	}
}

// TestHealthCommand: `pipeline health` exits 0 on an ok answer and 1 with
// the reason otherwise, as a container HEALTHCHECK needs.
func TestHealthCommand(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "2 tasks restoring their state\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if code, out, errs := runCLI(t, "health", "--addr", addr); code != 0 || out != "ok\n" {
		t.Fatalf("health: exit %d %q %q", code, out, errs)
	}
	if code, _, errs := runCLI(t, "health", "--addr", addr, "--ready"); code != 1 || !strings.Contains(errs, "/readyz: 503 Service Unavailable: 2 tasks restoring their state") {
		t.Fatalf("health --ready while restoring: exit %d %q", code, errs)
	}
	ready.Store(true)
	if code, _, _ := runCLI(t, "health", "--addr", addr, "--ready"); code != 0 {
		t.Fatalf("health --ready once ready: exit %d", code)
	}
	srv.Close()
	if code, _, errs := runCLI(t, "health", "--addr", addr); code != 1 || !strings.Contains(errs, "/healthz") {
		t.Fatalf("health with nothing listening: exit %d %q", code, errs)
	}
}
