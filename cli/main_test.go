package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// Every command runs in the test process; none may leave a goroutine
// behind (the embedded broker, the demo feeder, the metrics server).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is written by the broker command's goroutine and read by
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestBrokerCreatesTheTopicsItIsGiven runs `pipeline broker --topics
// --partitions` and asks it, as a client would, what it holds.
func TestBrokerCreatesTheTopicsItIsGiven(t *testing.T) {
	port := freePort(t)
	var out, errb syncBuffer
	e := &env{reg: ops.NewRegistry(), stdout: &out, stderr: &errb}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- e.main(ctx, []string{"broker", "--port", fmt.Sprint(port), "--topics", "a, b", "--partitions", "3", "--log-level", "error"})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "broker listening on") {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("broker exited %d before listening\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("broker did not start\nstderr: %s", errb.String())
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", port)))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	mctx, mcancel := context.WithTimeout(context.Background(), 20*time.Second)
	details, err := adm.ListTopics(mctx)
	mcancel()
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"a", "b"} {
		d, ok := details[topic]
		if !ok {
			t.Errorf("topic %q was not created; the broker has %v", topic, details.Names())
			continue
		}
		if n := len(d.Partitions); n != 3 {
			t.Errorf("topic %q has %d partitions, want 3", topic, n)
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("broker exited %d on a stop, want 0\nstderr: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not stop")
	}
	if !strings.Contains(out.String(), "broker stopped") {
		t.Errorf("stdout lacks the stop line:\n%s", out.String())
	}
}

func TestLoggerFollowsLevelAndFormat(t *testing.T) {
	tests := []struct {
		name     string
		cfg      config.Log
		override string
		json     bool
		debug    bool // a debug line is written
		info     bool // an info line is written
	}{
		{name: "default: text at info", cfg: config.Log{}, info: true},
		{name: "json at debug", cfg: config.Log{Level: "debug", Format: "json"}, json: true, debug: true, info: true},
		{name: "warn drops info", cfg: config.Log{Level: "warn"}},
		{name: "the flag overrides the file", cfg: config.Log{Level: "error", Format: "json"}, override: "debug", json: true, debug: true, info: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			log := newLogger(&b, tc.cfg, tc.override)
			log.Debug("dbg-line", "k", 1)
			log.Info("info-line", "k", 2)
			log.Warn("warn-line", "k", 3)
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			if got := strings.Contains(b.String(), "dbg-line"); got != tc.debug {
				t.Errorf("debug line written: %v, want %v\n%s", got, tc.debug, b.String())
			}
			if got := strings.Contains(b.String(), "info-line"); got != tc.info {
				t.Errorf("info line written: %v, want %v\n%s", got, tc.info, b.String())
			}
			if !strings.Contains(b.String(), "warn-line") {
				t.Errorf("warn line missing:\n%s", b.String())
			}
			for _, l := range lines {
				var m map[string]any
				isJSON := json.Unmarshal([]byte(l), &m) == nil
				if isJSON != tc.json {
					t.Errorf("line %q is JSON: %v, want %v", l, isJSON, tc.json)
				}
				if !tc.json && !strings.Contains(l, "msg=") {
					t.Errorf("text line %q lacks msg=", l)
				}
			}
		})
	}
}
