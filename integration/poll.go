package integration

import (
	"context"
	"testing"
	"time"
)

// poll calls cond until it reports done, returns an error, or ctx ends.
// The interval starts short, so a condition that is almost true costs
// little, and backs off so a slow one does not hammer the broker.
func poll(ctx context.Context, cond func() (bool, error)) error {
	interval := 10 * time.Millisecond
	for {
		done, err := cond()
		if err != nil || done {
			return err
		}
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		interval = min(2*interval, 250*time.Millisecond)
	}
}

// WaitFor polls cond until it reports done, failing the test after timeout
// with what was awaited and the last status cond gave. cond runs on the
// calling goroutine, which must be the test's.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (done bool, status string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now()
	var status string
	err := poll(ctx, func() (bool, error) {
		var done bool
		done, status = cond()
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: gave up after %v: %v; last status: %s", what, time.Since(start).Round(time.Millisecond), err, status)
	}
}
