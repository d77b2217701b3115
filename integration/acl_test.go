package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/pipeline-run/pipeline/wire"
)

// saslProps make a kafka-local broker authenticate clients with SASL/PLAIN
// and authorize them with KRaft's StandardAuthorizer: admin is a super
// user, pipeline has only the ACLs a test grants. The controller listener
// stays PLAINTEXT; its principal, ANONYMOUS, is the node talking to itself.
const saslProps = `sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_pipeline="pipeline-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false`

// TestAuthorizationFailuresNameTheMissingACL runs a keyed count as a
// principal with no ACLs, on a broker with SASL and an authorizer, and
// follows the pipeline's errors: each run must stop by itself, at once,
// with an error naming the resource and the operations to allow; the test
// grants exactly those and runs again. The ACLs a pipeline needs are
// known (below): every error must name some of them, none twice, and once
// they are all granted the run must be exact.
func TestAuthorizationFailuresNameTheMissingACL(t *testing.T) {
	requireBinary(t)
	if os.Getenv("KAFKA_LOCAL") != "1" {
		t.Skip("needs a broker of its own with SASL and an authorizer: runs with KAFKA_LOCAL=1 (the last step of scripts/test.sh)")
	}
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), kafkaLocalStartBound)
	defer cancel()
	b, err := newKafkaLocal(ctx, filepath.Join(e.logDir, "secured"), e.logDir,
		[]string{"KAFKA_LOCAL_SECURITY_PROTOCOL=SASL_PLAINTEXT"}, saslProps)
	if err != nil {
		t.Fatalf("starting a broker with SASL and an authorizer: %v", err)
	}
	t.Cleanup(b.Close)
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.SASL(plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	adm := kadm.NewClient(admin)
	const partitions, records, keys = 2, 2_000, 50
	CreateTopics(t, adm, partitions, e.input, e.output)
	// The test's checks read and write through the secured broker as admin.
	se := *e
	se.cl, se.adm, se.seeds = admin, adm, []string{b.Addr()}
	produceSeqs(t, &se, 0, records, keys)

	body := countConfig(&se, partitions, "sasl: {mechanism: PLAIN, username: pipeline, password: pipeline-secret}\n")
	cfgPath := filepath.Join(e.logDir, "acl.yaml")
	if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	changelog := wire.ChangelogTopic(e.group, "per_key")
	progress := e.group + "-progress"
	// What the count pipeline does, and so may be told to ask for.
	needed := map[string]bool{
		"Topic " + e.input + " READ":               true,
		"Topic " + e.output + " WRITE":             true,
		"Topic " + e.output + " DESCRIBE_CONFIGS":  true,
		"Topic " + changelog + " CREATE":           true,
		"Topic " + changelog + " READ":             true,
		"Topic " + changelog + " WRITE":            true,
		"Topic " + changelog + " DESCRIBE_CONFIGS": true,
		"Topic " + progress + " CREATE":            true,
		"Topic " + progress + " WRITE":             true,
		"Topic " + progress + " DESCRIBE_CONFIGS":  true,
		"Group " + e.group + " READ":               true,
		"TransactionalId " + e.group + "-i1 WRITE": true,
	}
	granted := map[string]bool{}
	hint := regexp.MustCompile(`needs ([A-Z_]+(?:(?:, | and )[A-Z_]+)*) on (Topic|Group|TransactionalId) "([^"]+)"`)
	for run := 1; ; run++ {
		if run > len(needed)+1 {
			t.Fatalf("still failing after %d runs", run-1)
		}
		p := e.startPipeline(cfgPath)
		end := se.inputEnd()
		exited := false
		WaitFor(t, time.Minute, fmt.Sprintf("run %d to stop or to count the input", run), func() (bool, string) {
			select {
			case <-p.Exited():
				exited = true
				return true, ""
			default:
			}
			_, c, err := se.committed()
			return err == nil && offsetsReached(c, end), fmt.Sprintf("committed %v of %v (%v)", sorted(c), sorted(end), err)
		})
		if !exited {
			p.Term()
			for acl, need := range needed {
				if need && !granted[acl] {
					t.Errorf("the pipeline ran without %s: it is not needed, or not checked before it is used", acl)
				}
			}
			t.Logf("run %d: with the %d ACLs granted, the count ran", run, len(granted))
			checkCounts(t, &se, records, keys)
			return
		}
		st := p.Wait(exitBound)
		if st.ExitCode() == 0 {
			t.Fatalf("run %d exited 0 before the input was counted", run)
		}
		text := lastError(p)
		ms := hint.FindAllStringSubmatch(text, -1)
		if ms == nil {
			t.Fatalf("run %d: exit %v with no error naming the ACL to add:\n%s", run, st, p.Tail(20))
		}
		for _, m := range ms {
			ops := strings.FieldsFunc(strings.ReplaceAll(m[1], " and ", ","), func(r rune) bool { return r == ',' || r == ' ' })
			t.Logf("run %d: exit %d: asks for %s on %s %q", run, st.ExitCode(), strings.Join(ops, ", "), m[2], m[3])
			for _, op := range ops {
				acl := m[2] + " " + m[3] + " " + op
				if !needed[acl] {
					t.Fatalf("run %d asks for %s, which the pipeline does not need:\n%s", run, acl, text)
				}
				if granted[acl] {
					t.Fatalf("run %d asks again for %s, which it was granted:\n%s", run, acl, text)
				}
				granted[acl] = true
				grant(t, adm, m[2], m[3], op)
			}
		}
	}
}

// grant allows User:pipeline op on the resource.
func grant(t *testing.T, adm *kadm.Client, resource, name, op string) {
	t.Helper()
	o, err := kmsg.ParseACLOperation(op)
	if err != nil {
		t.Fatal(err)
	}
	b := kadm.NewACLs().Allow("User:pipeline").Operations(o).ResourcePatternType(kadm.ACLPatternLiteral)
	switch resource {
	case "Topic":
		b.Topics(name)
	case "Group":
		b.Groups(name)
	case "TransactionalId":
		b.TransactionalIDs(name)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := adm.CreateACLs(ctx, b)
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("granting %s on %s %s: %v", op, resource, name, err)
	}
	// The broker's authorizer applies the new ACL when it replays the
	// metadata log, a moment after CreateACLs returns: a run started at
	// once could still be refused. Wait until the broker describes it
	// (created for any host, "*").
	b.AllowHosts("*")
	for {
		desc, err := adm.DescribeACLs(ctx, b)
		if err == nil && len(desc) > 0 {
			err = desc[0].Err
		}
		if err == nil && len(desc) > 0 && len(desc[0].Described) > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("granting %s on %s %s: the broker does not describe it after %v (last: %v)", op, resource, name, 30*time.Second, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lastError is the error a pipeline that stopped printed last: from its
// last line starting "pipeline: " to the end.
func lastError(p *Process) string {
	lines := strings.Split(p.Tail(60), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "pipeline: ") {
			return strings.Join(lines[i:], "\n")
		}
	}
	return ""
}
