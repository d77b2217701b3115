package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// produceCLI runs produce with stdin.
func produceCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{reg: ops.NewRegistry(), stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}
	code = e.main(context.Background(), append([]string{"produce"}, args...))
	return code, out.String(), errb.String()
}

// show renders records as key=value [headers].
func showRecords(recs []*kgo.Record) string {
	var out []string
	for _, r := range recs {
		s := fmt.Sprintf("%s=%s", r.Key, r.Value)
		if r.Key == nil {
			s = "<nil>=" + string(r.Value)
		}
		if r.Value == nil {
			s += "<nil>"
		}
		for _, h := range r.Headers {
			s += fmt.Sprintf(" %s:%s", h.Key, h.Value)
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

func TestProduce(t *testing.T) {
	addr := testkit.NewKafka(t, kfake.SeedTopics(1, "j", "r", "e", "f", "bad")).Addr
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := func(topic string) string {
		t.Helper()
		recs, err := offsets.ReadToEnd(ctx, cl, topic, true)
		if err != nil {
			t.Fatal(err)
		}
		return showRecords(recs)
	}
	file := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(file, []byte("a|1\nb|2\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, stdin string
		args        []string
		out, topic  string
		want        string
	}{
		{"JSON lines keyed by a field, with a header", "{\"id\": \"x\", \"n\": 1}\n\n{\"id\": 7, \"n\": 2}\n",
			[]string{"--topic", "j", "--key-field", "id", "--header", "src=test"}, "produced 2 records to j", "j",
			"x={\"id\": \"x\", \"n\": 1} src:test\n7={\"id\": 7, \"n\": 2} src:test"},
		{"raw lines from a file, split at a separator", "",
			[]string{"--topic", "r", "--format", "raw", "--key-separator", "|", "--file", file}, "produced 2 records to r", "r",
			"a=1\nb=2"},
		{"envelopes with headers and a tombstone", `{"key": "k1", "value": {"n": 1}, "headers": {"h": "v"}}` + "\n" + `{"key": "k1", "value": null}` + "\n" + `{"value": "text"}` + "\n",
			[]string{"--topic", "e", "--format", "envelope"}, "produced 3 records to e", "e",
			"k1={\"n\": 1} h:v\nk1=<nil>\n<nil>=text"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := produceCLI(t, tc.stdin, append(tc.args, "--brokers", addr)...)
			if code != 0 || !strings.Contains(out, tc.out) {
				t.Fatalf("exit %d, want 0 and %q\nstdout: %s\nstderr: %s", code, tc.out, out, errs)
			}
			if got := read(tc.topic); got != tc.want {
				t.Fatalf("%s holds:\n%s\nwant:\n%s", tc.topic, got, tc.want)
			}
		})
	}

	bad := []struct {
		name, stdin string
		args        []string
		code        int
		want        string
	}{
		{"a line that is not JSON names its line", "{\"n\": 1}\n{\"n\": \n", []string{"--topic", "bad"}, ExitFailure, "stdin:2: not JSON: unexpected end of JSON input"},
		{"a missing key field", "{\"n\": 1}\n", []string{"--topic", "bad", "--key-field", "id"}, ExitFailure, "stdin:1: --key-field id: the object has no such field"},
		{"an envelope with an unknown field", `{"key": "a", "vaule": 1}` + "\n", []string{"--topic", "bad", "--format", "envelope"}, ExitFailure, `stdin:1: not an envelope {"key": ..., "value": ..., "headers": {...}}: json: unknown field "vaule"`},
		{"an envelope without a value", `{"key": "a"}` + "\n", []string{"--topic", "bad", "--format", "envelope"}, ExitFailure, `stdin:1: the envelope has no "value"`},
		{"a raw line without the separator", "a=1\nb\n", []string{"--topic", "bad", "--format", "raw", "--key-separator", "="}, ExitFailure, `stdin:2: --key-separator "=" is not in the line`},
		{"a topic that does not exist", "{}\n", []string{"--topic", "nope"}, ExitFailure, `topic "nope" does not exist (create it with ` + "`pipeline topics create nope`)"},
		{"no topic", "{}\n", nil, ExitUsage, "produce: --topic is required"},
		{"an unknown format", "{}\n", []string{"--topic", "bad", "--format", "csv"}, ExitUsage, `produce: --format "csv": must be json, raw or envelope`},
		{"a key field with raw lines", "{}\n", []string{"--topic", "bad", "--format", "raw", "--key-field", "id"}, ExitUsage, "produce: --key-field is for --format json"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := produceCLI(t, tc.stdin, append(tc.args, "--brokers", addr)...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, tc.code, tc.want, out, errs)
			}
		})
	}
	// The lines before a bad one were written, and said so.
	if got := read("bad"); !strings.HasPrefix(got, "<nil>={\"n\": 1}") {
		t.Errorf("bad holds %q, want the lines before each bad one", got)
	}
}

// TestProduceFailsOnAFailedWrite makes the broker refuse every write:
// produce must say how many records were lost and exit 1.
func TestProduceFailsOnAFailedWrite(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	code, out, errs := produceCLI(t, "{\"n\": 1}\n{\"n\": 2}\n", "--brokers", c.ListenAddrs()[0], "--topic", "t")
	if code != ExitFailure || !strings.Contains(errs, "produce: 2 of 2 records were not written to t: TOPIC_AUTHORIZATION_FAILED") || strings.Contains(out, "produced") {
		t.Fatalf("exit %d, want 1 naming the lost records\nstdout: %s\nstderr: %s", code, out, errs)
	}
}
