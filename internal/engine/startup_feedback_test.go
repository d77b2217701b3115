package engine

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStartUpSaysWhatItWaitsFor: waiting for brokers that do not answer,
// and for the cluster checks, is not silent.
func TestStartUpSaysWhatItWaitsFor(t *testing.T) {
	old := waitLogEvery
	waitLogEvery = 100 * time.Millisecond
	defer func() { waitLogEvery = old }()
	var mu sync.Mutex
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	err = dialCheck(context.Background(), []string{dead}, 700*time.Millisecond, log)
	if err == nil || !strings.Contains(err.Error(), "none of ["+dead+"] answers") {
		t.Fatalf("dialCheck: %v", err)
	}
	stop := sayWhileWaiting(log, "checking the cluster")
	time.Sleep(350 * time.Millisecond)
	stop()
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, `msg="waiting for the brokers to accept a connection" brokers=[`+dead+`]`) || !strings.Contains(out, "last_err=") {
		t.Fatalf("no line says which brokers it waits for:\n%s", out)
	}
	if !strings.Contains(out, `msg="still waiting" for="checking the cluster"`) {
		t.Fatalf("no line says the cluster checks are under way:\n%s", out)
	}
}
