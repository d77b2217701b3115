package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// brokersTxnMaxTimeout is the smallest transaction.max.timeout.ms of the
// brokers: the suite's own setting for the brokers it starts, and for a
// cluster of someone else's what each broker says of itself.
func (e *env) brokersTxnMaxTimeout() time.Duration {
	e.t.Helper()
	if e.broker.Kind() != "external" {
		return suiteTxnMaxTimeout
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	brokers, err := e.adm.ListBrokers(ctx)
	if err != nil {
		e.t.Fatalf("listing brokers: %v", err)
	}
	rcs, err := e.adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		e.t.Fatalf("describing the brokers' configs: %v", err)
	}
	limit := time.Duration(0)
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "transaction.max.timeout.ms" {
				continue
			}
			ms, err := strconv.ParseInt(c.MaybeValue(), 10, 64)
			if err != nil {
				e.t.Fatalf("broker %s: transaction.max.timeout.ms %q: %v", rc.Name, c.MaybeValue(), err)
			}
			if d := time.Duration(ms) * time.Millisecond; limit == 0 || d < limit {
				limit = d
			}
		}
	}
	if limit == 0 {
		e.t.Fatal("no broker reports its transaction.max.timeout.ms")
	}
	return limit
}

// TestATransactionTimeoutAboveTheBrokersLimitIsRefusedAtStartUp runs a
// pipeline whose transactions.timeout is a minute above the
// transaction.max.timeout.ms the brokers were started with (in their own
// configuration file, not Kafka's default). On Kafka, the cluster-wide
// config resource holds only dynamic settings, so a check reading it found
// nothing, passed, and the pipeline then failed every transaction. The
// check must see what each broker enforces and stop before anything runs,
// naming both values.
func TestATransactionTimeoutAboveTheBrokersLimitIsRefusedAtStartUp(t *testing.T) {
	e := newEnv(t)
	CreateTopics(t, e.adm, 1, e.input, e.output)
	limit := e.brokersTxnMaxTimeout()
	c := e.config(1)
	c.TxnTimeout = limit + time.Minute
	p := e.startPipeline(c.Write(t, e.logDir))
	state := p.Wait(90 * time.Second)
	if state.ExitCode() != 1 {
		t.Fatalf("the pipeline exited with %v, want exit status 1; log tail:\n%s", state, p.Tail(20))
	}
	tail := p.Tail(10)
	for _, want := range []string{
		fmt.Sprintf("transactions.timeout (%s)", c.TxnTimeout),
		fmt.Sprintf("transaction.max.timeout.ms (%s)", limit),
	} {
		if !strings.Contains(tail, want) {
			t.Fatalf("the pipeline's last words do not say %q:\n%s", want, tail)
		}
	}
	if fileContains(p.LogPath(), "pipeline running") {
		t.Fatalf("the pipeline started before refusing its time-out:\n%s", tail)
	}
	t.Logf("refused at start-up: %s", lastLine(tail))
}
