package cli

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pipeline-run/pipeline/internal/testkit"
)

func TestTopicsCreateAndList(t *testing.T) {
	k := testkit.NewKafka(t)
	c, addr := k.Cluster, k.Addr

	code, out, errs := runCLI(t, "topics", "create", "events", "--brokers", addr, "--partitions", "3", "--config", "cleanup.policy=compact", "--config", "retention.ms=1000")
	if code != 0 || !strings.Contains(out, "created topic events (3 partitions)") {
		t.Fatalf("topics create: exit %d\n%s%s", code, out, errs)
	}
	if ti := c.TopicInfo("events"); ti == nil || ti.Configs["cleanup.policy"] == nil || *ti.Configs["cleanup.policy"] != "compact" {
		t.Fatalf("the broker has %+v for events, want cleanup.policy=compact", ti)
	}
	if code, out, errs = runCLI(t, "topics", "create", "--brokers", addr, "plain", "other"); code != 0 || strings.Count(out, "created topic") != 2 || !strings.Contains(out, "created topic plain (1 partition)\n") {
		t.Fatalf("topics create of two: exit %d\n%s%s", code, out, errs)
	}
	code, _, errs = runCLI(t, "topics", "create", "events", "--brokers", addr)
	if code != ExitFailure || !strings.Contains(errs, `topic "events" already exists`) {
		t.Fatalf("creating a topic twice: exit %d\n%s", code, errs)
	}

	code, out, errs = runCLI(t, "topics", "list", "--brokers", addr)
	if code != 0 {
		t.Fatalf("topics list: exit %d\n%s%s", code, out, errs)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		rows[strings.Fields(l)[0]] = strings.Join(strings.Fields(l), " ")
	}
	if rows["events"] != "events 3 1 compact" || rows["plain"] != "plain 1 1 delete" {
		t.Errorf("topics list:\n%s", out)
	}
	code, out, _ = runCLI(t, "topics", "list", "--brokers", addr, "-v")
	if code != 0 || !strings.Contains(out, "CONFIGS") || !strings.Contains(out, "cleanup.policy=compact,retention.ms=1000") {
		t.Errorf("topics list -v: exit %d\n%s", code, out)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no cluster named", []string{"topics", "list"}, "-c FILE or --brokers host:port is required"},
		{"a broker address without a port", []string{"topics", "list", "--brokers", "localhost"}, `--brokers: "localhost" is not a host:port address`},
		{"no topic named", []string{"topics", "create", "--brokers", addr}, "topics create: name the topics to create"},
		{"a bad topic name", []string{"topics", "create", "a b", "--brokers", addr}, `topics create: "a b" is not a valid topic name`},
		{"no partitions", []string{"topics", "create", "x", "--brokers", addr, "--partitions", "0"}, "--partitions must be at least 1, found 0"},
		{"a config without a value", []string{"topics", "create", "x", "--brokers", addr, "--config", "cleanup.policy"}, `invalid value "cleanup.policy" for flag -config: want name=value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tc.args...)
			if code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, ExitUsage, tc.want, out, errs)
			}
		})
	}
	if c.TopicInfo("x") != nil {
		t.Error("a refused topics create created the topic")
	}
}

// TestToolsReachTheEmbeddedBrokerOnlyAtAKnownPort: a file with brokers:
// embedded names no address unless it sets embedded.port.
func TestToolsReachTheEmbeddedBrokerOnlyAtAKnownPort(t *testing.T) {
	path := writeFile(t, "name: v\nbrokers: embedded\nsources: {in: {topics: [a]}}\nsinks: {out: {topic: b}}\n")
	for _, args := range [][]string{{"topics", "list", "-c", path}, {"offsets", "show", "-c", path}, {"audit", "-c", path}, {"consume", "-c", path, "--topic", "b"}} {
		code, _, errs := runCLI(t, args...)
		if code != ExitUsage || !strings.Contains(errs, "set embedded.port (or PIPELINE_EMBEDDED_PORT) to reach it while the run lasts") {
			t.Errorf("%v: exit %d\n%s", args, code, errs)
		}
	}
}

// TestTopicsToCreateAreForTheEmbeddedBrokerOnly runs a file with
// topics.create against brokers of its own: run warns and creates nothing.
func TestTopicsToCreateAreForTheEmbeddedBrokerOnly(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := writeFile(t, "name: v\nbrokers: ["+c.ListenAddrs()[0]+"]\ntopics: {create: [{name: in}]}\nsources: {in: {topics: [in]}}\nsinks: {out: {topic: b}}\n")
	code, _, errs := runCLI(t, "run", "-c", path)
	if code != ExitFailure || !strings.Contains(errs, "topics.create is for the embedded broker; its topics are not created on these brokers") ||
		!strings.Contains(errs, `topic "in" does not exist`) {
		t.Fatalf("exit %d, want 1 after the warning\n%s", code, errs)
	}
	if c.TopicInfo("in") != nil {
		t.Error("topics.create was honoured on brokers other than the embedded one")
	}
}

// TestEmbeddedPortTaken: a port the embedded broker cannot listen on is
// the file's to fix, exit 2.
func TestEmbeddedPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("PIPELINE_EMBEDDED_PORT", fmt.Sprint(l.Addr().(*net.TCPAddr).Port))
	path := writeFile(t, "name: v\nbrokers: embedded\ntopics: {create: [{name: in}]}\nsources: {in: {topics: [in]}}\nsinks: {out: {topic: b}}\n")
	code, _, errs := runCLI(t, "run", "-c", path)
	if code != ExitUsage || !strings.Contains(errs, "pipeline: embedded.port: ") || !strings.Contains(errs, "address already in use") {
		t.Fatalf("exit %d, want 2 naming embedded.port\n%s", code, errs)
	}
}
