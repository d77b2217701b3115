package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/lz4frame"
)

// ClientOpts translates the connection settings of cfg (brokers, TLS, SASL)
// into client options. seeds overrides cfg.Brokers (the embedded broker's
// address). It is the one place config becomes kgo.Opt for connecting;
// every client of the process starts from it.
func ClientOpts(cfg *config.Config, seeds []string, log *slog.Logger) ([]kgo.Opt, error) {
	if len(seeds) == 0 {
		seeds = cfg.Brokers.Addrs
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("brokers: no broker address (the embedded broker must be started first)")
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("pipeline-" + cfg.Name),
	}
	if log != nil {
		opts = append(opts, kgo.WithLogger(kgoLogger{log}))
	}
	if cfg.TLS.Enabled {
		tc, err := tlsConfig(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch m := strings.ToUpper(cfg.SASL.Mechanism); m {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: cfg.SASL.Username, Pass: cfg.SASL.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.Username, Pass: cfg.SASL.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.Username, Pass: cfg.SASL.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("sasl.mechanism: unknown mechanism %q", cfg.SASL.Mechanism)
	}
	return opts, nil
}

func tlsConfig(c config.TLS) (*tls.Config, error) {
	tc := &tls.Config{ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: no PEM certificate in %s", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// transactOpts adds what makes the client exactly-once: the group with
// static membership, read_committed, stable offsets, the transactional id
// and time-out, and rebalances held back until a checkpoint is done.
func transactOpts(cfg *config.Config, base []kgo.Opt, topics []string, onRevoked func(map[string][]int32), hooks ...kgo.Hook) []kgo.Opt {
	opts := append([]kgo.Opt(nil), base...)
	revoked := func(_ context.Context, _ *kgo.Client, m map[string][]int32) { onRevoked(m) }
	reset := kgo.NewOffset().AtStart()
	if cfg.Consumer.StartFrom == "latest" {
		reset = kgo.NewOffset().AtEnd()
	}
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(topics...),
		kgo.InstanceID(cfg.InstanceID),
		kgo.SessionTimeout(cfg.Consumer.SessionTimeout),
		kgo.RebalanceTimeout(cfg.Consumer.RebalanceTimeout),
		// Range assignment gives one member the same partition number of
		// every source topic: a task's inputs stay together.
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(reset),
		kgo.FetchMaxBytes(cfg.Consumer.FetchMaxBytes),
		kgo.FetchMaxPartitionBytes(cfg.Consumer.FetchMaxPartitionBytes),
		kgo.WithDecompressor(lz4frame.NewDecompressor()),
		// A partition resumed after its restore joins the next fetch:
		// one under way without it may wait this long for records of the
		// others (the client's default is 5 s; Kafka's consumer, 500 ms).
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsRevoked(revoked),
		kgo.OnPartitionsLost(revoked),

		kgo.TransactionalID(cfg.Transactions.ID(cfg.InstanceID)),
		kgo.TransactionTimeout(cfg.Transactions.Timeout),
		kgo.ProducerBatchMaxBytes(cfg.Producer.BatchMaxBytes),
		kgo.MaxBufferedRecords(cfg.Producer.MaxBufferedRecords),
		kgo.MaxBufferedBytes(int(cfg.Producer.MaxBufferedBytes)),
		kgo.ProducerLinger(cfg.Producer.Linger),
		compression(cfg.Producer.Compression),
	)
	if len(hooks) > 0 {
		opts = append(opts, kgo.WithHooks(hooks...))
	}
	return opts
}

// compression is the producer's codec option. lz4, the default, compresses
// with lz4frame: the client's own lz4 codec spends about as long hashing
// the batch for a content checksum as it does compressing it.
func compression(name string) kgo.Opt {
	switch name {
	case "gzip":
		return kgo.ProducerBatchCompression(kgo.GzipCompression(), kgo.NoCompression())
	case "snappy":
		return kgo.ProducerBatchCompression(kgo.SnappyCompression(), kgo.NoCompression())
	case "zstd":
		return kgo.ProducerBatchCompression(kgo.ZstdCompression(), kgo.NoCompression())
	case "none":
		return kgo.ProducerBatchCompression(kgo.NoCompression())
	}
	return kgo.WithCompressor(lz4frame.NewCompressor())
}

// kgoLogger bridges the client's logger to slog. The client's info level is
// chatty (every rebalance step); it goes to debug.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	switch {
	case k.l.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelDebug
	case k.l.Enabled(context.Background(), slog.LevelWarn):
		return kgo.LogLevelWarn
	}
	return kgo.LogLevelError
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	default:
		l = slog.LevelDebug
	}
	k.l.Log(context.Background(), l, "kafka client: "+msg, kv...)
}

// sayWhileWaiting logs what start-up waits for every waitLogEvery until
// the returned func is called (which waits for the logging goroutine).
func sayWhileWaiting(log *slog.Logger, what string) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(exited)
		t := time.NewTicker(waitLogEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				log.Warn("still waiting", "for", what, "waited", time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-exited }
}

// waitLogEvery is how often start-up says what it still waits for.
var waitLogEvery = 3 * time.Second

// DialCheck fails with a clear message when none of seeds accepts a
// connection within within (one round of attempts for 0), so that a tool
// pointed at the wrong address says so rather than retrying in silence.
func DialCheck(ctx context.Context, seeds []string, within time.Duration) error {
	return dialCheck(ctx, seeds, within, nil)
}

// dialCheck fails fast with a clear message when no seed broker answers,
// instead of letting every client retry in silence.
// With a logger, it says what it waits for every few seconds.
func dialCheck(ctx context.Context, seeds []string, within time.Duration, log *slog.Logger) error {
	start := time.Now()
	deadline, said := start.Add(within), start
	var last error
	for {
		for _, s := range seeds {
			d := net.Dialer{Timeout: 2 * time.Second}
			c, err := d.DialContext(ctx, "tcp", s)
			if err == nil {
				c.Close()
				return nil
			}
			last = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("brokers: none of %v answers: %w", seeds, last)
		}
		if log != nil && time.Since(said) >= waitLogEvery {
			said = time.Now()
			log.Warn("waiting for the brokers to accept a connection", "brokers", seeds, "waited", time.Since(start).Round(time.Second),
				"gives_up_in", time.Until(deadline).Round(time.Second), "last_err", last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
