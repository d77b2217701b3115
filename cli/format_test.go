package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/internal/testkit"
	"github.com/pipeline-run/pipeline/offsets"
)

// decodeJSON decodes one JSON document from out and checks that its
// object has exactly the keys given, the documented field names.
func decodeJSON(t *testing.T, out string, keys ...string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON document:\n%s", out)
	}
	checkKeys(t, m, keys...)
	return m
}

func checkKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	got := slices.Sorted(maps.Keys(m))
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v: %v", got, want, m)
	}
}

func TestValidateFormatJSON(t *testing.T) {
	valid := writeFile(t, "name: v\nbrokers: [127.0.0.1:9]\nsources: {in: {topics: [a]}}\nsinks: {out: {topic: b}}\ndead_letter: {topic: d}\n")
	code, out, errs := runCLI(t, "validate", "-c", valid, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	m := decodeJSON(t, out, "name", "valid", "graph", "source_topics", "output_topics", "errors")
	if m["name"] != "v" || m["valid"] != true || m["graph"] != "source in[a] | sink out<-in->b | dead-letter->d" ||
		fmt.Sprint(m["source_topics"]) != "[a]" || fmt.Sprint(m["output_topics"]) != "[b d]" || len(m["errors"].([]any)) != 0 {
		t.Errorf("validate --format json: %v", m)
	}

	bad := writeFile(t, "name: v\nbrokers: [127.0.0.1:9]\ncheckpoint: {interval: 5}\nsources: {in: {topics: [a]}}\nsteps: [{filter: \"value.x >\"}]\nsinks: {out: {}}\n")
	code, out, errs = runCLI(t, "validate", "-c", bad, "--format", "json")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d\n%s%s", code, ExitUsage, out, errs)
	}
	m = decodeJSON(t, out, "name", "valid", "graph", "source_topics", "output_topics", "errors")
	if m["valid"] != false {
		t.Errorf("valid = %v", m["valid"])
	}
	var got []string
	for _, x := range m["errors"].([]any) {
		e := x.(map[string]any)
		checkKeys(t, e, "path", "line", "message")
		got = append(got, fmt.Sprintf("%v:%v:%v", e["path"], e["line"], e["message"]))
	}
	want := []string{
		`checkpoint.interval:3:a duration needs a unit: found 5; write "5s", "5ms" or "5m" (units: ns, us, ms, s, m, h)`,
		`steps[0].filter:5:expression "value.x >": unexpected token EOF (1:9)`,
		`sinks.out.topic:6:required`,
	}
	for i, w := range want {
		if i >= len(got) || !strings.HasPrefix(got[i], w) {
			t.Errorf("errors:\n%s\nwant, in order, starting with:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			break
		}
	}

	// A file that cannot be read is one error without a path.
	code, out, _ = runCLI(t, "validate", "-c", bad+".missing", "--format", "json")
	m = decodeJSON(t, out, "name", "valid", "graph", "source_topics", "output_topics", "errors")
	if errs := m["errors"].([]any); code != ExitUsage || len(errs) != 1 || !strings.Contains(errs[0].(map[string]any)["message"].(string), "no such file") {
		t.Errorf("a missing file: exit %d, %v", code, m)
	}

	code, _, errs = runCLI(t, "validate", "-c", valid, "--format", "xml")
	if code != ExitUsage || !strings.Contains(errs, `--format "xml": must be text or json`) {
		t.Errorf("--format xml: exit %d\n%s", code, errs)
	}
}

// TestToolsFormatJSON runs a pipeline to its end and reads offsets show,
// transactions hanging and audit as JSON.
func TestToolsFormatJSON(t *testing.T) {
	addr := testkit.NewKafka(t, kfake.SeedTopics(2, "in")).Addr
	path := writeFile(t, fmt.Sprintf(`name: js
brokers: [%s]
instance_id: i1
checkpoint: {interval: 100ms}
sources: {in: {topics: [in]}}
sinks: {out: {topic: out}}
`, addr))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 30
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Append(nil, i), Value: fmt.Append(nil, i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	runUntil(t, ctx, path, func() (bool, error) {
		recs, err := offsets.ReadToEnd(ctx, cl, "out", true)
		return len(recs) == n, err
	})

	code, out, errs := runCLI(t, "offsets", "show", "-c", path, "--format", "json")
	if code != 0 {
		t.Fatalf("offsets show: exit %d\n%s%s", code, out, errs)
	}
	m := decodeJSON(t, out, "group", "partitions")
	var committed float64
	for _, x := range m["partitions"].([]any) {
		p := x.(map[string]any)
		checkKeys(t, p, "topic", "partition", "committed", "end", "lag")
		if p["topic"] != "in" || p["lag"] != 0.0 || p["committed"] != p["end"] {
			t.Errorf("partition %v after the run", p)
		}
		committed += p["committed"].(float64)
	}
	if m["group"] != "js" || len(m["partitions"].([]any)) != 2 || committed != n {
		t.Errorf("offsets show --format json: %v", m)
	}

	code, out, errs = runCLI(t, "transactions", "hanging", "-c", path, "--format", "json")
	if code != 0 {
		t.Fatalf("transactions hanging: exit %d\n%s%s", code, out, errs)
	}
	m = decodeJSON(t, out, "older_than_ms", "topics", "hanging")
	if m["older_than_ms"] != 60000.0 || fmt.Sprint(m["topics"]) != "[out]" || len(m["hanging"].([]any)) != 0 {
		t.Errorf("transactions hanging --format json: %v", m)
	}

	code, out, errs = runCLI(t, "audit", "-c", path, "--format", "json")
	if code != 0 {
		t.Fatalf("audit: exit %d\n%s%s", code, out, errs)
	}
	m = decodeJSON(t, out, "name", "ok", "checkpoints", "input_records", "output_records", "window", "sourced_outputs", "sourced_inputs", "findings", "notes")
	if m["name"] != "js" || m["ok"] != true || m["input_records"] != float64(n) || m["output_records"] != float64(n) || m["checkpoints"].(float64) < 1 ||
		m["window"] != nil || len(m["findings"].([]any)) != 0 {
		t.Errorf("audit --format json: %v", m)
	}
}
