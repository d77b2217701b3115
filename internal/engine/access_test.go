package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/txsink"
)

// TestAccessErrorsNameTheACL checks what a refusal by the authorizer turns
// into for each resource the pipeline uses: the resource, its role, the
// operations and the command that grants them. The refusals of a real
// broker are in integration's TestAuthorizationFailuresNameTheMissingACL.
func TestAccessErrorsNameTheACL(t *testing.T) {
	cfg, err := config.Parse([]byte(`name: shop
brokers: [b:9092]
instance_id: i1
sasl: {mechanism: PLAIN, username: alice, password: pw}
sources: {in: {topics: [orders]}}
steps:
  - {name: by_customer, key_by: value.customer}
  - {name: totals, aggregate: {fields: {n: count}}}
sinks: {out: {topic: totals}}
dead_letter: {topic: dlq}
`), "shop.yaml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Build(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	acc := access{cfg: cfg, g: g}
	denied := kerr.TopicAuthorizationFailed
	for _, tc := range []struct {
		err  error
		want string
	}{
		{acc.deniedTopic(denied, "orders", false), `User:alice needs READ on Topic "orders" (the source topic); grant it with ` + "`kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal User:alice --operation Read --topic orders`"},
		{acc.deniedTopic(denied, "totals", false), `needs WRITE and DESCRIBE_CONFIGS on Topic "totals" (the sink topic)`},
		{acc.deniedTopic(denied, "dlq", false), `needs WRITE and DESCRIBE_CONFIGS on Topic "dlq" (the dead-letter topic)`},
		{acc.deniedTopic(denied, "shop-totals-changelog", false), `needs READ, WRITE and DESCRIBE_CONFIGS on Topic "shop-totals-changelog" (the changelog of step totals)`},
		{acc.deniedTopic(denied, "shop-by_customer-repartition", false), `needs READ, WRITE, DESCRIBE_CONFIGS, ALTER_CONFIGS and DELETE on Topic "shop-by_customer-repartition" (the repartition topic of step by_customer)`},
		{acc.deniedTopic(kerr.ClusterAuthorizationFailed, "shop-progress", true), `needs CREATE on Topic "shop-progress" (the progress topic, audit.topic)`},
		{acc.explain(fmt.Errorf("committing: %w", kerr.GroupAuthorizationFailed)), `needs READ on Group "shop" (the consumer group); grant it with ` + "`kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal User:alice --operation Read --group shop`"},
		{acc.explain(kerr.TransactionalIDAuthorizationFailed), `needs WRITE on TransactionalId "shop-i1" (the transactional id of this instance)`},
		{acc.explain(&txsink.ProduceError{Topic: "totals", Partition: 3, Err: denied}), `producing to totals/3: not authorized: User:alice needs WRITE and DESCRIBE_CONFIGS on Topic "totals"`},
	} {
		if got := tc.err.Error(); !strings.Contains(got, tc.want) {
			t.Errorf("got  %s\nwant it to hold %s", got, tc.want)
		}
	}
	// Not a refusal: unchanged; a refusal keeps its cause.
	if err := acc.explain(kerr.NotLeaderForPartition); err != kerr.NotLeaderForPartition {
		t.Errorf("explain(%v) = %v", kerr.NotLeaderForPartition, err)
	}
	if err := acc.explain(kerr.GroupAuthorizationFailed); !isAccessDenied(err) {
		t.Errorf("%v lost its cause", err)
	}
}
