package offsets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reset is what reading from a broker that went away returns.
var reset = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{reset, true},
		{fmt.Errorf("listing: %w", reset), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{kerr.NotLeaderForPartition, true},
		{kerr.UnknownTopicOrPartition, true},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.InvalidRequest, false},
		{kgo.ErrClientClosed, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.Join(reset, context.DeadlineExceeded), false},
		{errors.New("something else"), false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestRetry(t *testing.T) {
	t.Run("transient errors pass", func(t *testing.T) {
		calls := 0
		err := Retry(context.Background(), func() error {
			if calls++; calls <= 3 {
				return reset
			}
			return nil
		})
		if err != nil || calls != 4 {
			t.Fatalf("Retry = %v after %d calls, want nil after 4", err, calls)
		}
	})
	t.Run("others return at once", func(t *testing.T) {
		calls := 0
		err := Retry(context.Background(), func() error { calls++; return kerr.TopicAuthorizationFailed })
		if !errors.Is(err, kerr.TopicAuthorizationFailed) || calls != 1 {
			t.Fatalf("Retry = %v after %d calls, want TOPIC_AUTHORIZATION_FAILED after 1", err, calls)
		}
	})
	t.Run("until ctx is done", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		calls := 0
		err := Retry(ctx, func() error { calls++; return reset })
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("Retry = %v, want the reset joined with the deadline", err)
		}
		// 50, 100, 200 ms pauses fit in 300 ms, and no more: the pause grows.
		if calls < 2 || calls > 5 {
			t.Fatalf("%d calls in 300 ms, want the pause between them to grow from 50 ms", calls)
		}
	})
}

// TestReadPartitionOutlastsABrokerRestart drops the connection of the first
// listings of offsets and fetches of a restore's read, as a broker going
// down and coming back does, with a client that does not retry itself.
func TestReadPartitionOutlastsABrokerRestart(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "cl"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequestRetries(0), kgo.DefaultProduceTopic("cl"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	drops := map[kmsg.Key]int{}
	for _, key := range []kmsg.Key{kmsg.ListOffsets, kmsg.Fetch} {
		left := 2
		c.ControlKey(key.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			if left == 0 {
				return nil, nil, false
			}
			left--
			drops[key]++ // control functions run serially
			c.KeepControl()
			return nil, errors.New("broker restarting"), true // closes the connection
		})
	}
	var got []string
	err = ReadPartition(ctx, cl, "cl", 0, 0, func(rs []*kgo.Record, _ Progress) error {
		for _, r := range rs {
			got = append(got, string(r.Value))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ReadPartition: %v", err)
	}
	if fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("read %v, want [0 1 2 3 4]", got)
	}
	if drops[kmsg.ListOffsets] != 2 || drops[kmsg.Fetch] != 2 {
		t.Fatalf("dropped %v, want 2 of each: the fault did not fire", drops)
	}
}
