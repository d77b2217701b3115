package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/txsink"
	"github.com/pipeline-run/pipeline/wire"
)

// brokerTxnMaxTimeout is Kafka's default transaction.max.timeout.ms.
const brokerTxnMaxTimeout = 15 * time.Minute

// prepare checks the cluster against the configuration before anything
// runs: the transaction time-out against the broker's maximum, that every
// source topic exists, that sink topics exist with the partitions the config
// asks for (creating missing ones), and reports transactions left hanging on
// the output partitions.
//
// It returns the size limits of the topics the pipeline writes, and the
// partitions of the topics it reads (sources and repartition topics).
func prepare(ctx context.Context, adm *kadm.Client, rs *rescaler, cfg *config.Config, g *Graph, log *slog.Logger) (*limits, map[string]int32, error) {
	if err := checkTxnTimeout(ctx, adm, cfg, log); err != nil {
		return nil, nil, err
	}

	acc := access{cfg: cfg, g: g}
	topics := g.SourceTopics()
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		if isAccessDenied(err) {
			// Which topic was refused is not said: name each.
			errs := make([]error, len(topics))
			for i, t := range topics {
				errs[i] = acc.deniedTopic(err, t, false)
			}
			err = errors.Join(errs...)
		}
		return nil, nil, fmt.Errorf("listing source topics: %w", err)
	}
	var srcMax int32
	parts := map[string]int32{} // partitions by topic read: sources, then repartition topics
	var errs []error
	for _, n := range g.nodes {
		if n.kind != sourceNode || n.internal {
			continue
		}
		for i, t := range n.source.Topics {
			d, ok := details[t]
			if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				errs = append(errs, fmt.Errorf("%s.topics[%d]: topic %q does not exist", n.path, i, t))
				continue
			}
			if d.Err != nil {
				errs = append(errs, fmt.Errorf("%s.topics[%d]: topic %q: %w", n.path, i, t, acc.deniedTopic(d.Err, t, false)))
				continue
			}
			p := int32(len(d.Partitions))
			parts[t] = p
			srcMax = max(srcMax, p)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}

	type want struct {
		path       string
		topic      string
		partitions int32
		explicit   bool
	}
	var wants []want
	for _, s := range g.sinks {
		w := want{path: s.path + ".partitions", topic: s.sink.topic, partitions: s.sink.partitions, explicit: s.sink.partitions > 0}
		if !w.explicit && cfg.Topics.Partitions > 0 {
			w.partitions, w.explicit, w.path = cfg.Topics.Partitions, true, "topics.partitions"
		}
		wants = append(wants, w)
	}
	if g.dlq != "" {
		w := want{path: "topics.partitions", topic: g.dlq, partitions: cfg.Topics.Partitions, explicit: cfg.Topics.Partitions > 0}
		wants = append(wants, w)
	}
	seen := map[string]bool{}
	for _, w := range wants {
		if seen[w.topic] {
			continue
		}
		seen[w.topic] = true
		if !w.explicit {
			w.partitions = srcMax
		}
		if err := ensureTopic(ctx, adm, acc, w.topic, w.partitions, w.explicit, w.path, log); err != nil {
			errs = append(errs, err)
		}
	}
	// Repartition topics: as many partitions as the sources, so that a
	// key's task number is the same on both sides.
	for _, n := range g.nodes {
		if n.repart == nil {
			continue
		}
		p := n.repart.partitions
		if p == 0 {
			p = max(srcMax, 1)
		}
		parts[n.repart.topic] = p
		// Records keep their event time as their timestamp: a time-based
		// retention would delete old ones before they are read. What was
		// consumed is deleted instead (purger).
		if err := ensureTopicWith(ctx, adm, acc, n.repart.topic, p, true, n.path, map[string]string{"retention.ms": "-1"}, log); err != nil {
			errs = append(errs, err)
		} else {
			keepForever(ctx, adm, n.repart.topic, log)
		}
	}
	// A step with keyed state over several streams pairs records of one
	// key only if every stream puts that key in the same partition number.
	for _, n := range g.nodes {
		if n.stateful() != nil && len(n.inputs) > 1 {
			if err := coPartitioned(g, n, parts); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Changelogs: one partition per task of their step, compacted (only
	// each key's last value matters to a restore).
	for _, n := range g.nodes {
		if n.stateful() == nil {
			continue
		}
		if err := ensureChangelog(ctx, adm, rs, acc, n, parts, log); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.Audit.Enabled && cfg.Audit.Topic != "" && !seen[cfg.Audit.Topic] {
		// One partition: the records of every instance in commit order.
		if err := ensureTopic(ctx, adm, acc, cfg.Audit.Topic, 1, true, "audit.topic", log); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	reportHanging(ctx, adm, cfg, g, log)
	written := g.OutputTopics()
	for _, n := range g.nodes {
		switch {
		case n.repart != nil:
			written = append(written, n.repart.topic)
		case n.stateful() != nil:
			written = append(written, wire.ChangelogTopic(cfg.Name, n.name))
		}
	}
	if cfg.Audit.Enabled && cfg.Audit.Topic != "" {
		written = append(written, cfg.Audit.Topic)
	}
	lim, err := topicLimits(ctx, adm, acc, cfg.Producer.BatchMaxBytes, written)
	return lim, parts, err
}

// stepTasks returns how many tasks run step n, one per partition number of
// the topics its records come from (sources, or the repartition topic of a
// key_by step before it), and those topics. A task is a partition number,
// so a step behind a key_by with more partitions than the sources runs in
// more tasks than the sources have partitions.
func stepTasks(n *node, parts map[string]int32) (int32, []string) {
	var tasks int32
	var topics []string
	seen := map[*node]bool{}
	var walk func(*node)
	walk = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if n.kind == sourceNode {
			for _, t := range n.source.Topics {
				tasks = max(tasks, parts[t])
				topics = append(topics, t)
			}
			return
		}
		for _, in := range n.inputs {
			walk(in.node)
		}
	}
	for _, in := range n.inputs {
		walk(in.node)
	}
	sort.Strings(topics)
	return max(tasks, 1), topics
}

// coPartitioned checks that the topics the streams of step n come from
// have one partition count.
func coPartitioned(g *Graph, n *node, parts map[string]int32) error {
	_, all := stepTasks(n, parts)
	// A broadcast step's topic holds every record in every partition:
	// any partition count serves.
	var topics []string
	for _, t := range all {
		if src := g.byTopic[t]; src == nil || !g.isBroadcast(src) {
			topics = append(topics, t)
		}
	}
	for _, t := range topics[min(1, len(topics)):] {
		if parts[t] != parts[topics[0]] {
			var have []string
			for _, t := range topics {
				have = append(have, fmt.Sprintf("%s has %d", t, parts[t]))
			}
			return fmt.Errorf("%s: step %s keeps state over streams that are not co-partitioned: a key must be in the same partition number of every topic they come from, and %s partitions. "+
				"Repartition its inputs by their key with key_by steps (their repartition topics get the same partitions) and read those instead:\n%s"+
				"or give the topics the same partitions and keys",
				n.path, n.name, strings.Join(have, ", "), keyBySuggestion(g, n))
		}
	}
	return nil
}

// keyBySuggestion is the YAML that makes the inputs of step n
// co-partitioned: a key_by step on each input that is not broadcast, and
// the step reading those.
func keyBySuggestion(g *Graph, n *node) string {
	var b strings.Builder
	from := make([]string, len(n.inputs))
	for i, in := range n.inputs {
		from[i] = in.node.name
		if in.output != "" {
			from[i] += "." + in.output
		}
		if in.node.kind == sourceNode && g.isBroadcast(in.node) {
			continue
		}
		name := strings.ReplaceAll(from[i], ".", "_") + "_by_key"
		fmt.Fprintf(&b, "  - {name: %s, from: %s, key_by: key}\n", name, from[i])
		from[i] = name
	}
	fmt.Fprintf(&b, "  - name: %s\n    from: [%s]\n", n.name, strings.Join(from, ", "))
	return b.String()
}

// ensureChangelog creates the changelog of stateful step n, compacted, with
// one partition per task of the step, or checks the one there has that
// many: a task's state lives in the partition of its number, and a task
// without one could neither write its state nor read it back.
//
// A step that keeps only operator state gets its state redistributed when
// its task count grew (rescaler); keyed state cannot move between tasks.
func ensureChangelog(ctx context.Context, adm *kadm.Client, rs *rescaler, acc access, n *node, parts map[string]int32, log *slog.Logger) error {
	topic := wire.ChangelogTopic(acc.cfg.Name, n.name)
	tasks, from := stepTasks(n, parts)
	details, err := adm.ListTopics(ctx, topic)
	if err == nil && isAccessDenied(details[topic].Err) {
		err = details[topic].Err
	}
	if err != nil {
		return fmt.Errorf("describing topic %q: %w", topic, acc.deniedTopic(err, topic, false))
	}
	if d, ok := details[topic]; ok && d.Err == nil {
		have := int32(len(d.Partitions))
		if done, err := rs.operatorState(ctx, adm, acc, n, topic, have, tasks); done || err != nil {
			return err
		}
		if have != tasks {
			return fmt.Errorf("%s: the changelog topic %q of step %s has %d partitions, but the step runs %d tasks, one per partition of %s: "+
				"its state would be written and read back by the wrong tasks, and keyed state cannot move between tasks (operator state can). The state was written for another number of partitions "+
				"(the input's changed, or an older version sized the changelog by the sources): stop every instance and run `pipeline state reset -c FILE --step %s` to start the step from empty state",
				n.path, topic, n.name, have, tasks, strings.Join(from, ", "), n.name)
		}
		return nil
	}
	return ensureTopicWith(ctx, adm, acc, topic, tasks, true, n.path, map[string]string{"cleanup.policy": "compact"}, log)
}

// checkTxnTimeout checks transactions.timeout against the
// transaction.max.timeout.ms of every broker: any of them can be the
// transaction coordinator, and one that finds the time-out too large fails
// every transaction. Each broker is asked for its own configuration: the
// cluster-wide resource holds only dynamic defaults, not what a broker's
// server.properties set. A principal without DescribeConfigs on the cluster
// gets a warning instead; a time-out the brokers refuse then stops the
// pipeline at its first transaction, naming the setting.
func checkTxnTimeout(ctx context.Context, adm *kadm.Client, cfg *config.Config, log *slog.Logger) error {
	// BrokerMetadata, not ListBrokers: that asks for every topic, and the
	// client would keep the answer, which lacks the changelogs created below,
	// and make the first restore wait out its metadata age to find them.
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("listing the brokers to read their transaction.max.timeout.ms: %w", err)
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, md.Brokers.NodeIDs()...)
	var denied error
	if err != nil {
		if !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return fmt.Errorf("reading the brokers' transaction.max.timeout.ms: %w", err)
		}
		denied = err
	}
	limit, from := brokerTxnMaxTimeout, "Kafka's default"
	for _, rc := range rcs {
		if rc.Err != nil {
			if errors.Is(rc.Err, kerr.ClusterAuthorizationFailed) {
				denied = rc.Err
				continue
			}
			return fmt.Errorf("reading transaction.max.timeout.ms of broker %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != "transaction.max.timeout.ms" || c.Value == nil {
				continue
			}
			ms, perr := strconv.ParseInt(*c.Value, 10, 64)
			if perr != nil {
				return fmt.Errorf("broker %s has transaction.max.timeout.ms %q, not a number of milliseconds", rc.Name, *c.Value)
			}
			if d := time.Duration(ms) * time.Millisecond; from == "Kafka's default" || d < limit {
				limit, from = d, "broker "+rc.Name
			}
		}
	}
	if denied != nil {
		log.Warn("cannot read the brokers' transaction.max.timeout.ms (the principal needs DESCRIBE_CONFIGS on the cluster); a transactions.timeout above it stops the pipeline at its first transaction",
			"transactions_timeout", cfg.Transactions.Timeout, "err", denied)
		return nil
	}
	if cfg.Transactions.Timeout > limit {
		return fmt.Errorf("transactions.timeout (%s) must not be larger than the transaction.max.timeout.ms (%s) of %s: lower transactions.timeout, or raise transaction.max.timeout.ms on every broker",
			cfg.Transactions.Timeout, limit, from)
	}
	return nil
}

func ensureTopic(ctx context.Context, adm *kadm.Client, acc access, topic string, partitions int32, explicit bool, path string, log *slog.Logger) error {
	return ensureTopicWith(ctx, adm, acc, topic, partitions, explicit, path, nil, log)
}

// ensureTopicWith is ensureTopic with topic configs of its own on top of
// topics.configs.
func ensureTopicWith(ctx context.Context, adm *kadm.Client, acc access, topic string, partitions int32, explicit bool, path string, extra map[string]string, log *slog.Logger) error {
	cfg := acc.cfg
	details, err := adm.ListTopics(ctx, topic)
	if err == nil && isAccessDenied(details[topic].Err) {
		err = details[topic].Err
	}
	if err != nil {
		return fmt.Errorf("describing topic %q: %w", topic, acc.deniedTopic(err, topic, false))
	}
	if d, ok := details[topic]; ok && d.Err == nil {
		if have := int32(len(d.Partitions)); explicit && have != partitions {
			return fmt.Errorf("%s: topic %q has %d partitions, the config asks for %d", path, topic, have, partitions)
		}
		return nil
	}
	if partitions <= 0 {
		partitions = 1
	}
	configs := map[string]*string{}
	for k, v := range cfg.Topics.Configs {
		configs[k] = kadm.StringPtr(v)
	}
	for k, v := range extra {
		configs[k] = kadm.StringPtr(v)
	}
	resp, err := adm.CreateTopic(ctx, partitions, cfg.Topics.ReplicationFactor, configs, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", topic, acc.deniedTopic(err, topic, true))
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", topic, acc.deniedTopic(resp.Err, topic, true))
	}
	log.Info("created topic", "topic", topic, "partitions", partitions)
	return nil
}

// keepForever sets retention.ms=-1 on a repartition topic made before
// repartition topics were created so. It only warns when it cannot: the
// topic works, but records older than its retention may be deleted unread.
func keepForever(ctx context.Context, adm *kadm.Client, topic string, log *slog.Logger) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err == nil {
		var rc kadm.ResourceConfig
		if rc, err = rcs.On(topic, nil); err == nil && rc.Err == nil {
			for _, c := range rc.Configs {
				if c.Key == "retention.ms" && c.Value != nil && *c.Value == "-1" {
					return
				}
			}
		}
	}
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("-1")}}, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = resp.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		log.Warn("could not set retention.ms=-1 on a repartition topic: records older than its retention may be deleted before they are read", "topic", topic, "err", err)
		return
	}
	log.Info("set retention.ms=-1 on a repartition topic: the pipeline deletes what it consumed instead", "topic", topic)
}

// reportHanging logs transactions open on the output partitions for longer
// than the transaction time-out: a hanging transaction pins the last stable
// offset and stalls every read_committed reader. `pipeline transactions`
// lists and aborts them.
func reportHanging(ctx context.Context, adm *kadm.Client, cfg *config.Config, g *Graph, log *slog.Logger) int {
	set, err := txsink.PartitionsOf(ctx, adm, g.OutputTopics()...)
	if err != nil {
		return -1
	}
	hanging, err := txsink.Hanging(ctx, adm, set, cfg.Transactions.Timeout)
	if err != nil {
		log.Debug("checking for hanging transactions", "err", err)
		return -1
	}
	for _, h := range hanging {
		log.Warn("hanging transaction on an output partition; read_committed readers are stalled behind it until it ends (see `pipeline transactions`)",
			"topic", h.Topic, "partition", h.Partition, "producer_id", h.ProducerID, "start_offset", h.StartOffset, "reason", h.Reason)
	}
	held := map[string]bool{}
	for _, h := range hanging {
		held[fmt.Sprintf("%s/%d", h.Topic, h.Partition)] = true
	}
	return len(held)
}

// hangingEvery is how often a running pipeline looks for transactions
// holding back its output partitions.
const hangingEvery = time.Minute

// watchHanging looks every hangingEvery for output partitions whose last
// stable offset someone's transaction, open longer than
// transactions.timeout, holds back (Stats.HeldPartitions, with a warning
// per partition), until ctx ends; the returned func waits for it.
func (p *Pipeline) watchHanging(ctx context.Context, adm *kadm.Client) (wait func()) {
	every := hangingEvery
	if p.hangingEvery > 0 {
		every = p.hangingEvery
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if n := reportHanging(cctx, adm, p.cfg, p.g, p.log); n >= 0 {
				p.stats.held.Store(int64(n))
			}
			cancel()
		}
	}()
	return func() { <-done }
}
