package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pipeline-run/pipeline/config"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (e *env) topics(ctx context.Context, args []string) error {
	return e.group(ctx, "topics", args, []subcommand{
		{"list", "topics list (-c FILE | --brokers ADDRS) [-v]",
			"Lists the cluster's topics with their partitions, replicas and cleanup.policy;\n-v adds every config set on a topic.", e.topicsList},
		{"create", "topics create NAME... (-c FILE | --brokers ADDRS) [--partitions N] [--replication-factor R] [--config k=v]...",
			"Creates topics. A topic that exists already is an error.", e.topicsCreate},
	})
}

func (e *env) topicsList(ctx context.Context, fs *command, args []string) error {
	t := fs.targetFlags()
	verbose := fs.Bool("v", false, "show every config set on a topic, not only cleanup.policy")
	if err := fs.parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := e.connect(ctx, t)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("listing topics: %w", err)
	}
	names := details.Names()
	slices.Sort(names)
	configs := map[string][]kadm.Config{}
	if len(names) > 0 {
		rcs, err := adm.DescribeTopicConfigs(ctx, names...)
		if err != nil {
			return fmt.Errorf("describing the topics' configs: %w", err)
		}
		for _, rc := range rcs {
			if rc.Err == nil {
				configs[rc.Name] = rc.Configs
			}
		}
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	head := "TOPIC\tPARTITIONS\tREPLICAS\tCLEANUP.POLICY"
	if *verbose {
		head += "\tCONFIGS"
	}
	fmt.Fprintln(tw, head)
	for _, name := range names {
		d := details[name]
		replicas := 0
		for _, p := range d.Partitions {
			replicas = max(replicas, len(p.Replicas))
		}
		policy := "?" // the broker did not say
		var set []string
		for _, c := range configs[name] {
			if c.Key == "cleanup.policy" {
				policy = c.MaybeValue()
			}
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				set = append(set, c.Key+"="+c.MaybeValue())
			}
		}
		line := fmt.Sprintf("%s\t%d\t%d\t%s", name, len(d.Partitions), replicas, policy)
		if *verbose {
			slices.Sort(set)
			line += "\t" + strings.Join(set, ",")
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func (e *env) topicsCreate(ctx context.Context, fs *command, args []string) error {
	t := fs.targetFlags()
	partitions := fs.Int("partitions", 1, "partitions of each topic")
	rf := fs.Int("replication-factor", -1, "replicas of each partition; -1: the brokers' default")
	configs := fs.keyValues("config", "a topic config `name=value`, such as cleanup.policy=compact; repeat for more")
	names, err := fs.parseArgs(args)
	if err != nil {
		return err
	}
	switch {
	case len(names) == 0:
		return usagef("topics create: name the topics to create (see pipeline topics create -h)")
	case *partitions < 1:
		return usagef("topics create: --partitions must be at least 1, found %d", *partitions)
	case *rf != -1 && (*rf < 1 || *rf > 32767):
		return usagef("topics create: --replication-factor must be -1 (the brokers' default) or from 1 to 32767, found %d", *rf)
	}
	for _, n := range names {
		if err := config.CheckTopicName(n); err != nil {
			return usagef("topics create: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := e.connect(ctx, t)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var errs []error
	for _, n := range names {
		if err := createTopic(ctx, adm, n, int32(*partitions), int16(*rf), configs); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(e.stdout, "created topic %s (%s)\n", n, count(*partitions, "partition"))
	}
	return errors.Join(errs...)
}

// createTopic creates one topic, saying which when it fails.
func createTopic(ctx context.Context, adm *kadm.Client, name string, partitions int32, rf int16, configs map[string]string) error {
	cfgs := make(map[string]*string, len(configs))
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		cfgs[k] = new(configs[k])
	}
	resp, err := adm.CreateTopic(ctx, partitions, rf, cfgs, name)
	if err == nil {
		err = resp.Err
	}
	switch {
	case errors.Is(err, kerr.TopicAlreadyExists):
		return fmt.Errorf("topic %q already exists", name)
	case err != nil:
		if resp.ErrMessage != "" {
			err = fmt.Errorf("%w: %s", err, resp.ErrMessage)
		}
		return fmt.Errorf("creating topic %q: %w", name, err)
	}
	return nil
}

// createConfigured creates the topics of topics.create on the embedded
// broker at seeds, which has just started, empty.
func createConfigured(ctx context.Context, cfg *config.Config, seeds []string, log *slog.Logger) error {
	if len(cfg.Topics.Create) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := dial(ctx, cfg, seeds)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range cfg.Topics.Create {
		p := t.PartitionsOr(cfg.Topics.Partitions)
		if err := createTopic(ctx, adm, t.Name, p, cfg.Topics.ReplicationFactor, t.Configs); err != nil {
			return fmt.Errorf("%s: %w", t.Path, err)
		}
		log.Info("created topic", "topic", t.Name, "partitions", p, "by", t.Path)
	}
	return nil
}
