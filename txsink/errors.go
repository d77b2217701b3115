package txsink

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ProduceError is the first produce failure of a transaction. The
// transaction was aborted; replaying from the committed offsets is safe.
type ProduceError struct {
	Topic     string
	Partition int32
	Err       error
}

func (e *ProduceError) Error() string {
	return fmt.Sprintf("producing to %s/%d: %v", e.Topic, e.Partition, e.Err)
}

func (e *ProduceError) Unwrap() error { return e.Err }

// UnknownOutcomeError means ending the transaction failed in a way that
// leaves its outcome unknown: it may have committed or aborted. The client
// must be rebuilt (which completes or aborts it on the broker) and the
// committed state read back; guessing either way would lose or double data.
type UnknownOutcomeError struct{ Err error }

func (e *UnknownOutcomeError) Error() string {
	return "transaction outcome unknown: " + e.Err.Error()
}

func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// Action is what a caller must do after an error.
type Action uint8

const (
	// Replay: the transaction was aborted; rewind to the committed offsets
	// and process again. The client is healthy.
	Replay Action = iota
	// Rebuild: the client's state is unknown or broken; close it, make a
	// new one and restore from committed state.
	Rebuild
	// Exit: continuing cannot help (fenced by a live twin, not authorised).
	Exit
)

func (a Action) String() string {
	switch a {
	case Replay:
		return "replay"
	case Rebuild:
		return "rebuild"
	}
	return "exit"
}

// fatal are the errors after which retrying cannot help: a configuration
// the brokers refuse, missing permissions, a broker too old for what the
// pipeline needs. The client reports some of them once and then fails every
// transaction at once (a producer id it could not get is not asked for
// again), so a caller that retried would spin.
var fatal = []error{
	kerr.FencedInstanceID,
	kerr.InvalidTransactionTimeout,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.SaslAuthenticationFailed,
	kerr.UnsupportedSaslMechanism,
	kerr.IllegalSaslState,
	kerr.UnsupportedVersion,
	kerr.UnsupportedForMessageFormat,
	kerr.UnsupportedCompressionType,
}

// Classify decides what an error from this package requires when nothing
// else is known: Exit for a fence of our group instance, a configuration the
// brokers refuse (INVALID_TRANSACTION_TIMEOUT), a refused authorization or
// an unsupported version, otherwise Rebuild, which is always safe. It
// returns Replay only for nil. A caller that saw the transaction abort
// cleanly (Abort returned nil) knows more, and may replay on the same
// client whatever the error was; the runtime does.
func Classify(err error) Action {
	if err == nil {
		return Replay
	}
	for _, f := range fatal {
		if errors.Is(err, f) {
			return Exit
		}
	}
	// A fenced producer (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) rebuilds
	// too: our own transaction timing out fences us as well (the broker
	// bumps the epoch when it aborts it), so one fence is not proof of a
	// twin; the caller decides from how long the transaction was open.
	//
	// Everything else, a produce error included, leaves the client in a
	// state only a new client is sure to be free of. Rebuilding is always
	// safe: the new producer's InitProducerID completes or aborts whatever
	// the old one left open.
	return Rebuild
}

// IsFenced reports whether err says another producer or member took our id.
func IsFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.FencedInstanceID)
}
