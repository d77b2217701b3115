// Package broker runs the embedded Kafka-protocol broker (franz-go's kfake)
// for the quick start, tests and local development. It speaks transactions,
// read_committed and consumer groups, and persists to disk when given a data
// directory. It is not a production broker.
package broker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options configures an embedded broker.
type Options struct {
	Port       int      // 0 picks a free port
	DataDir    string   // "" keeps everything in memory
	Topics     []string // created at start when missing
	Partitions int32    // for Topics; default 1
	// TxnMaxTimeoutMs is the broker's transaction.max.timeout.ms; 0 keeps
	// Kafka's default (15 minutes).
	TxnMaxTimeoutMs int
	Logger          *slog.Logger
}

// Broker is a running embedded broker.
type Broker struct {
	c *kfake.Cluster
}

// Start starts a broker listening on 127.0.0.1.
func Start(o Options) (*Broker, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(o.Port), // kfake listens on 127.0.0.1 only
	}
	if o.DataDir != "" {
		opts = append(opts, kfake.DataDir(o.DataDir))
	}
	if len(o.Topics) > 0 {
		p := o.Partitions
		if p <= 0 {
			p = 1
		}
		opts = append(opts, kfake.SeedTopics(p, o.Topics...))
	}
	if o.TxnMaxTimeoutMs > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": fmt.Sprint(o.TxnMaxTimeoutMs)}))
	}
	if o.Logger != nil {
		opts = append(opts, kfake.WithLogger(slogAdapter{o.Logger}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	return &Broker{c: c}, nil
}

// Addrs returns the broker's listen addresses.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Cluster returns the underlying fake cluster, for fault injection in tests.
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// Close stops the broker, flushing its data directory if it has one.
func (b *Broker) Close() { b.c.Close() }

type slogAdapter struct{ l *slog.Logger }

func (s slogAdapter) Logf(level kfake.LogLevel, msg string, args ...any) {
	if level > kfake.LogLevelWarn && !s.l.Enabled(context.Background(), slog.LevelDebug) {
		return // the broker logs every request at info
	}
	switch level {
	case kfake.LogLevelError:
		s.l.Error(fmt.Sprintf(msg, args...))
	case kfake.LogLevelWarn:
		s.l.Warn(fmt.Sprintf(msg, args...))
	default:
		s.l.Debug(fmt.Sprintf(msg, args...))
	}
}
