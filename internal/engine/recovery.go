package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/txsink"
)

// What the coordinator does after a checkpoint that did not commit. Every
// failed checkpoint goes through recovery.decide: it is the one place that
// turns an error into replay, rebuild or exit (the table in
// docs/exactly-once.md, "When a checkpoint fails").
type next uint8

const (
	goOn    next = iota // the same client reads on: committed, or aborted cleanly and rewound
	rebuild             // the client's state is unknown: make a new one, restore from committed state
	stop                // retrying cannot help: the pipeline exits with decision.err
)

type decision struct {
	next next
	wait time.Duration // before the next checkpoint
	err  error         // with stop
}

// recovery keeps what the decisions need to remember between checkpoints:
// how many failed in a row, since when, and how many of them were fences
// or refusals. It belongs to the coordinator goroutine.
type recovery struct {
	cfg *config.Config
	acc access
	log *slog.Logger

	failed  int       // checkpoints in a row that did not commit
	since   time.Time // when the first of them ended
	fences  int       // of them, fences while the transaction was young
	refused int       // of them, records the broker refused
}

func newRecovery(cfg *config.Config, g *Graph, log *slog.Logger) *recovery {
	return &recovery{cfg: cfg, acc: access{cfg: cfg, g: g}, log: log}
}

// maxRefusedInARow is how many checkpoints in a row may fail on records the
// broker refuses (not transient trouble) before the pipeline stops, rather
// than replay the same failure for ever.
const maxRefusedInARow = 10

// maxFencesInARow is how many checkpoints in a row may be fenced while
// their transaction was younger than transactions.timeout before the
// pipeline takes it for a twin and exits.
const maxFencesInARow = 3

// Back-off between failed checkpoints: none after the first failure (a
// rebalance, a one-off error), then 100 ms doubling to at most 5 s.
const (
	backoffBase = 100 * time.Millisecond
	backoffMax  = 5 * time.Second
)

// decide says what follows checkpoint cp, which ended at now.
func (r *recovery) decide(cp Checkpoint, now time.Time) decision {
	if cp.Committed {
		r.failed, r.fences, r.refused = 0, 0, 0
		return decision{next: goOn}
	}
	r.failed++
	if r.failed == 1 {
		r.since = now
	}
	d := decision{next: goOn, wait: backoff(r.failed)}
	if cp.Err != nil {
		if err := r.fatal(cp); err != nil {
			return decision{next: stop, err: err}
		}
	}
	// A fenced client fails everything after the fence: only a new one
	// can go on.
	if cp.rebuild || txsink.IsFenced(cp.Err) {
		d.next = rebuild
	}
	if r.failed > 1 && now.Sub(r.since) >= r.cfg.Checkpoint.FailureTimeout {
		return decision{next: stop, err: fmt.Errorf("checkpoints have failed for %s (%d in a row, none committed), longer than checkpoint.failure_timeout (%s); the last: %w",
			now.Sub(r.since).Round(time.Millisecond), r.failed, r.cfg.Checkpoint.FailureTimeout, errOr(cp.Err))}
	}
	r.logAbort(cp, d)
	return d
}

// fatal returns the error the pipeline stops with after cp, or nil if it
// may go on.
func (r *recovery) fatal(cp Checkpoint) error {
	err := cp.Err
	if txsink.Classify(err) == txsink.Exit {
		if errors.Is(err, kerr.FencedInstanceID) {
			return zombieErr(r.cfg, err)
		}
		if explained := r.acc.explain(err); explained != err {
			return explained
		}
		return fmt.Errorf("%s: %w", fatalHint(r.cfg, err), err)
	}
	if refusedByBroker(err) {
		r.refused++
		if r.refused >= maxRefusedInARow {
			return fmt.Errorf("the broker refused this checkpoint's records %d times in a row; replaying cannot help: %w", r.refused, err)
		}
	} else {
		r.refused = 0
	}
	if txsink.IsFenced(err) {
		// The broker bumps the producer epoch when it aborts a
		// transaction that outlived transactions.timeout, and our next
		// request is fenced: that is our own slowness, not a twin. A
		// transaction younger than the time-out was fenced by another
		// producer with our transactional id.
		if cp.Duration >= r.cfg.Transactions.Timeout {
			r.fences = 0
			r.log.Warn("checkpoint fenced after its transaction was open longer than transactions.timeout: the broker aborted it; rebuilding the client",
				"checkpoint", cp.ID, "open_for", cp.Duration.Round(time.Millisecond), "transactions_timeout", r.cfg.Transactions.Timeout)
			return nil
		}
		r.fences++
		if r.fences >= maxFencesInARow {
			return fmt.Errorf("%w (transactional id %s): fenced %d times in a row, each time with a transaction younger than transactions.timeout (%s), by another producer using this transactional id; another process with instance_id %q is probably running: %w",
				ErrZombie, r.cfg.Transactions.ID(r.cfg.InstanceID), r.fences, r.cfg.Transactions.Timeout, r.cfg.InstanceID, err)
		}
	} else {
		r.fences = 0
	}
	return nil
}

// refusedByBroker reports whether err is a produce error no retry fixes.
func refusedByBroker(err error) bool {
	var pe *txsink.ProduceError
	if !errors.As(err, &pe) {
		return false
	}
	var ke *kerr.Error
	return errors.As(pe.Err, &ke) && !ke.Retriable
}

// logAbort logs every checkpoint that did not commit; the growing pause
// between failed checkpoints bounds how often.
func (r *recovery) logAbort(cp Checkpoint, d decision) {
	level, then := slog.LevelInfo, "replay"
	if cp.Err != nil {
		level = slog.LevelWarn
	}
	if d.next == rebuild {
		then = "rebuild"
	}
	r.log.Log(context.Background(), level, "checkpoint aborted", "checkpoint", cp.ID, "records", cp.Records, "then", then,
		"failed_in_a_row", r.failed, "retry_in", d.wait, "err", cp.Err)
	if d.next == rebuild {
		r.log.Warn("rebuilding the transactional client and resuming from the committed state", "checkpoint", cp.ID, "err", cp.Err)
	}
}

// zombieErr is the exit of an instance whose group membership was taken by
// a twin with the same instance_id.
func zombieErr(cfg *config.Config, err error) error {
	return fmt.Errorf("%w: the consumer group gave instance_id %q to another member (FENCED_INSTANCE_ID); another process with this instance_id is running: %w",
		ErrZombie, cfg.InstanceID, err)
}

// fatalHint names what to change for an error retrying cannot fix.
func fatalHint(cfg *config.Config, err error) string {
	switch {
	case errors.Is(err, kerr.InvalidTransactionTimeout):
		return fmt.Sprintf("the brokers refused transactions.timeout (%s): it is larger than their transaction.max.timeout.ms; lower transactions.timeout or raise transaction.max.timeout.ms on every broker",
			cfg.Transactions.Timeout)
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return fmt.Sprintf("not authorized to use transactional id %q: grant WRITE and DESCRIBE on TransactionalId %q (or the prefix %q) to the pipeline's principal",
			cfg.Transactions.ID(cfg.InstanceID), cfg.Transactions.ID(cfg.InstanceID), cfg.Transactions.IDPrefix+"-")
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Sprintf("not authorized to use consumer group %q: grant READ on Group %q to the pipeline's principal", cfg.Group, cfg.Group)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return "not authorized for a topic: grant READ and DESCRIBE on the source topics, and WRITE and DESCRIBE on the sink, dead-letter, changelog, repartition and audit topics, to the pipeline's principal"
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return "not authorized for a cluster action: grant IDEMPOTENT_WRITE and DESCRIBE_CONFIGS on the Cluster to the pipeline's principal"
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return fmt.Sprintf("SASL authentication failed: check sasl.mechanism (%q), sasl.username and sasl.password", cfg.SASL.Mechanism)
	case errors.Is(err, kerr.UnsupportedVersion), errors.Is(err, kerr.UnsupportedForMessageFormat):
		return "the brokers do not support a request the pipeline needs (transactions with offsets in them, KIP-447, need Apache Kafka 2.5 or newer)"
	case errors.Is(err, kerr.UnsupportedCompressionType):
		return fmt.Sprintf("the brokers do not support producer.compression (%s)", cfg.Producer.Compression)
	}
	return "retrying cannot help"
}

// backoff is the pause after the n-th failed checkpoint in a row, with a
// fifth of jitter so that instances failing together do not retry together.
func backoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := backoffMax
	if n < 8 {
		d = min(backoffBase<<(n-2), backoffMax)
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

func errOr(err error) error {
	if err == nil {
		return errors.New("no error: every one was aborted by a rebalance")
	}
	return err
}

// rateLog logs at most one line per period; each line says how many were
// left out since the last (not_logged_since). Safe for concurrent use.
type rateLog struct {
	every time.Duration
	last  atomic.Int64 // unix nanoseconds of the last line logged
	quiet atomic.Int64 // lines left out since
}

func (l *rateLog) log(log *slog.Logger, level slog.Level, msg string, args ...any) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(l.every) || !l.last.CompareAndSwap(last, now) {
		l.quiet.Add(1)
		return
	}
	args = append(args, "not_logged_since", l.quiet.Swap(0))
	log.Log(context.Background(), level, msg, args...)
}
