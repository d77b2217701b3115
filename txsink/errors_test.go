package txsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Action
	}{
		{"no error needs nothing more than a replay", nil, Replay},
		{"a fenced instance id means a live twin: exit", kerr.FencedInstanceID, Exit},
		{"a fenced instance id inside a produce error still exits", &ProduceError{Topic: "out", Partition: 1, Err: kerr.FencedInstanceID}, Exit},
		{"a fenced instance id wrapped by a caller still exits", fmt.Errorf("consuming in/0: %w", kerr.FencedInstanceID), Exit},
		{"a fenced instance id joined with another error still exits", errors.Join(kerr.RequestTimedOut, kerr.FencedInstanceID), Exit},
		{"a refused transactional id exits", kerr.TransactionalIDAuthorizationFailed, Exit},
		{"a refused group exits", kerr.GroupAuthorizationFailed, Exit},
		{"a refused topic exits", &ProduceError{Topic: "out", Err: kerr.TopicAuthorizationFailed}, Exit},
		{"a refused cluster action exits", &UnknownOutcomeError{Err: kerr.ClusterAuthorizationFailed}, Exit},
		{"a transaction time-out above the broker's maximum exits", &ProduceError{Topic: "out", Err: kerr.InvalidTransactionTimeout}, Exit},
		{"the client's unrecoverable producer id error exits", fmt.Errorf("producer ID has a fatal, unrecoverable error, err: %w", kerr.InvalidTransactionTimeout), Exit},
		{"a failed SASL authentication exits", kerr.SaslAuthenticationFailed, Exit},
		{"a broker without a needed API version exits", &UnknownOutcomeError{Err: kerr.UnsupportedVersion}, Exit},
		// Our own transaction timing out fences us too: one fence is not
		// proof of a twin.
		{"a fenced producer rebuilds", kerr.ProducerFenced, Rebuild},
		{"an invalid producer epoch rebuilds", &UnknownOutcomeError{Err: kerr.InvalidProducerEpoch}, Rebuild},
		{"a produce error rebuilds", &ProduceError{Topic: "out", Partition: 2, Err: kerr.InvalidRecord}, Rebuild},
		{"an unknown outcome rebuilds", &UnknownOutcomeError{Err: context.DeadlineExceeded}, Rebuild},
		{"an unknown error rebuilds", errors.New("connection reset"), Rebuild},
		// Classification is by identity, never by message.
		{"an error that only reads like a fenced instance id rebuilds", errors.New(kerr.FencedInstanceID.Error()), Rebuild},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Fatalf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestIsFenced(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a fenced producer wrapped", fmt.Errorf("checkpoint 7: %w", kerr.ProducerFenced), true},
		{"a fenced producer", kerr.ProducerFenced, true},
		{"an invalid producer epoch in an unknown outcome", &UnknownOutcomeError{Err: kerr.InvalidProducerEpoch}, true},
		{"a fenced instance id in a produce error", &ProduceError{Topic: "out", Err: kerr.FencedInstanceID}, true},
		{"no error", nil, false},
		{"a refused transactional id is not a fence", kerr.TransactionalIDAuthorizationFailed, false},
		{"a produce error is not a fence", &ProduceError{Topic: "out", Err: kerr.InvalidRecord}, false},
		{"a time-out is not a fence", &UnknownOutcomeError{Err: kerr.RequestTimedOut}, false},
		{"an error that only reads like a fence is not one", errors.New(kerr.ProducerFenced.Error()), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsFenced(tc.err); got != tc.want {
				t.Fatalf("IsFenced(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestErrorsNameWhatFailedAndUnwrap(t *testing.T) {
	pe := &ProduceError{Topic: "out", Partition: 3, Err: kerr.InvalidRecord}
	if !errors.Is(pe, kerr.InvalidRecord) {
		t.Error("ProduceError does not unwrap to its cause")
	}
	if got := pe.Error(); !strings.HasPrefix(got, "producing to out/3: ") || !strings.Contains(got, kerr.InvalidRecord.Message) {
		t.Errorf("ProduceError reads %q", got)
	}
	ue := &UnknownOutcomeError{Err: fmt.Errorf("flushing: %w", context.DeadlineExceeded)}
	if !errors.Is(ue, context.DeadlineExceeded) {
		t.Error("UnknownOutcomeError does not unwrap to its cause")
	}
	if got := ue.Error(); got != "transaction outcome unknown: flushing: context deadline exceeded" {
		t.Errorf("UnknownOutcomeError reads %q", got)
	}
	var target *ProduceError
	if !errors.As(fmt.Errorf("checkpoint 4: %w", pe), &target) || target.Partition != 3 {
		t.Error("a wrapped ProduceError is not found with errors.As")
	}
	for a, want := range map[Action]string{Replay: "replay", Rebuild: "rebuild", Exit: "exit"} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q, want %q", a, got, want)
		}
	}
}
