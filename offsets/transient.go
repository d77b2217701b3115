package offsets

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Transient reports whether a request that failed with err may succeed if
// made again: a retriable Kafka error, or the connection to the broker
// failing (reset, closed or refused while a broker restarts). The client
// retries these itself, but a few tries during a broker restart can all
// fail, and the error then reaches the caller. A cancelled or expired
// context and a closed client are not transient.
func Transient(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrClientClosed):
		return false
	case kerr.IsRetriable(err):
		return true
	}
	var se *os.SyscallError
	var oe *net.OpError
	return errors.As(err, &se) || errors.As(err, &oe) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// Retry calls do until it returns nil, an error that is not Transient, or
// ctx is done, pausing between calls from 50 ms doubling to 2 s. The error
// after ctx is done joins do's last error with ctx's.
func Retry(ctx context.Context, do func() error) error {
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		err := do()
		if err == nil || !Transient(err) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
