package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/txsink"
	"github.com/pipeline-run/pipeline/wire"
)

// AccessError is a request the brokers' authorizer refused, with what the
// pipeline's principal must be granted on the resource for the pipeline to
// run: every operation the pipeline performs on it, so that one error
// names all the ACLs of that resource.
type AccessError struct {
	Principal string   // "User:name" when SASL names it, else ""
	Resource  string   // Topic, Group, TransactionalId or Cluster
	Name      string   // the resource's name ("" for the cluster)
	Role      string   // what the resource is to the pipeline, e.g. "source topic"
	Ops       []string // the operations to allow, as kafka-acls names them
	Err       error    // the broker's refusal
}

func (e *AccessError) Error() string {
	who := e.Principal
	if who == "" {
		who = "the pipeline's principal"
	}
	var what string
	if e.Resource == "Cluster" {
		what = "the Cluster"
	} else {
		what = fmt.Sprintf("%s %q", e.Resource, e.Name)
	}
	principal := e.Principal
	if principal == "" {
		principal = "User:<principal>"
	}
	var cmd strings.Builder
	fmt.Fprintf(&cmd, "kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal %s", principal)
	for _, op := range e.Ops {
		fmt.Fprintf(&cmd, " --operation %s", op)
	}
	switch e.Resource {
	case "Topic":
		fmt.Fprintf(&cmd, " --topic %s", e.Name)
	case "Group":
		fmt.Fprintf(&cmd, " --group %s", e.Name)
	case "TransactionalId":
		fmt.Fprintf(&cmd, " --transactional-id %s", e.Name)
	case "Cluster":
		cmd.WriteString(" --cluster")
	}
	return fmt.Sprintf("not authorized: %s needs %s on %s (the %s); grant it with `%s`: %v",
		who, joinOps(e.Ops), what, e.Role, cmd.String(), e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

func joinOps(ops []string) string {
	up := make([]string, len(ops))
	for i, op := range ops {
		// DescribeConfigs → DESCRIBE_CONFIGS, Kafka's name.
		var b strings.Builder
		for j, r := range op {
			if j > 0 && r >= 'A' && r <= 'Z' {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		}
		up[i] = strings.ToUpper(b.String())
	}
	switch len(up) {
	case 0:
		return "access"
	case 1:
		return up[0]
	}
	return strings.Join(up[:len(up)-1], ", ") + " and " + up[len(up)-1]
}

// isAccessDenied reports whether err is a refusal by the authorizer.
func isAccessDenied(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// access knows which ACLs the pipeline needs on each resource.
type access struct {
	cfg *config.Config
	g   *Graph
}

// deniedTopic returns err as an *AccessError naming what to grant on
// topic, or err itself when it is not a refusal by the authorizer (or
// already says what to grant). creating says err answered the topic's
// creation: CREATE on it (or on the cluster) is what is missing.
func (a access) deniedTopic(err error, topic string, creating bool) error {
	var ae *AccessError
	if !isAccessDenied(err) || errors.As(err, &ae) {
		return err
	}
	role, ops := a.topicNeeds(topic)
	if creating {
		ops = []string{"Create"}
	}
	return a.error("Topic", topic, role, ops, err)
}

// denied returns err as an *AccessError for the group or transactional id
// it names, or err itself.
func (a access) denied(err error) error {
	var ae *AccessError
	switch {
	case errors.As(err, &ae):
		return err
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return a.error("Group", a.cfg.Group, "consumer group", []string{"Read"}, err)
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return a.error("TransactionalId", a.cfg.Transactions.ID(a.cfg.InstanceID), "transactional id of this instance", []string{"Write"}, err)
	}
	return err
}

// explain returns err as an *AccessError when it is a refusal by the
// authorizer whose resource is known: a topic a record was refused on, the
// group, the transactional id. Anything else comes back unchanged.
func (a access) explain(err error) error {
	var ae *AccessError
	if !isAccessDenied(err) || errors.As(err, &ae) {
		return err
	}
	var pe *txsink.ProduceError
	if errors.As(err, &pe) && pe.Topic != "" && isAccessDenied(pe.Err) {
		return fmt.Errorf("producing to %s/%d: %w", pe.Topic, pe.Partition, a.deniedTopic(pe.Err, pe.Topic, false))
	}
	return a.denied(err)
}

func (a access) error(resource, name, role string, ops []string, err error) *AccessError {
	e := &AccessError{Resource: resource, Name: name, Role: role, Ops: ops, Err: err}
	if a.cfg.SASL.Mechanism != "" && a.cfg.SASL.Username != "" {
		e.Principal = "User:" + a.cfg.SASL.Username
	}
	return e
}

// topicNeeds is what topic is to the pipeline, and the operations it
// performs on it once it exists (READ and WRITE imply DESCRIBE). Topics
// the pipeline creates also need CREATE while they do not exist.
func (a access) topicNeeds(topic string) (role string, ops []string) {
	g, cfg := a.g, a.cfg
	for _, n := range g.nodes {
		if n.repart != nil && n.repart.topic == topic {
			// Created, written, read back; its retention set and its
			// consumed records deleted.
			return "repartition topic of step " + strings.TrimSuffix(n.name, ".repartition"), []string{"Read", "Write", "DescribeConfigs", "AlterConfigs", "Delete"}
		}
		if n.stateful() != nil && wire.ChangelogTopic(cfg.Name, n.name) == topic {
			return "changelog of step " + n.name, []string{"Read", "Write", "DescribeConfigs"}
		}
	}
	// Repartition topics are sources too: they come first.
	for _, t := range g.SourceTopics() {
		if t == topic {
			return "source topic", []string{"Read"}
		}
	}
	if cfg.Audit.Enabled && topic == cfg.Audit.Topic {
		return "progress topic, audit.topic", []string{"Write", "DescribeConfigs"}
	}
	if topic == g.dlq {
		return "dead-letter topic", []string{"Write", "DescribeConfigs"}
	}
	return "sink topic", []string{"Write", "DescribeConfigs"}
}
