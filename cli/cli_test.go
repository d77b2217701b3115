package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/runner"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCLIContext(t, context.Background(), args...)
}

// runCLIContext is runCLI under ctx: its end is a SIGTERM.
func runCLIContext(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{reg: ops.NewRegistry(), stdout: &out, stderr: &errb}
	code = e.main(ctx, args)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pipeline.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExitCodes(t *testing.T) {
	valid := writeFile(t, "name: v\nbrokers: [127.0.0.1:9]\nsources: {in: {topics: [a]}}\nsinks: {out: {topic: b}}\n")
	bad := writeFile(t, `name: v
brokers: [127.0.0.1:9]
checkpoint: {intervl: 1s}
sources: {in: {topics: [a]}}
steps:
  - filter: "value.x >"
sinks: {out: {}}
`)
	badGraph := writeFile(t, `name: v
brokers: [127.0.0.1:9]
sources: {in: {topics: [a]}}
steps:
  - filter: "value.x >"
  - map: {vaule: x}
sinks: {out: {topic: b, key: "("}}
`)
	ttlBare := writeFile(t, "name: v\nbrokers: [127.0.0.1:9]\nsources: {in: {topics: [a]}}\nsteps: [{dedupe: {ttl: 5}}]\nsinks: {out: {topic: b}}\n")
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string
		wantErr    []string
		inOrder    bool // wantErr appear in this order
		notWantErr []string
	}{
		{name: "validate prints the graph of a valid file", args: []string{"validate", "-c", valid}, code: 0,
			wantOut: []string{"v: valid: source in[a] | sink out<-in->b"}},
		{name: "validate reports every config and graph error with its path, in line order, and exits 2", args: []string{"validate", "-c", bad}, code: 2,
			wantErr: []string{
				`checkpoint.intervl (line 3): unknown key (did you mean "interval"?)`,
				`steps[0].filter (line 6): expression "value.x >": unexpected token EOF (1:9)`,
				"sinks.out.topic (line 7): required",
			}, inOrder: true},
		{name: "validate reports every graph error with its path and the parser's message, and exits 2", args: []string{"validate", "-c", badGraph}, code: 2,
			wantErr: []string{
				`steps[0].filter (line 5): expression "value.x >": unexpected token EOF (1:9)`,
				"steps[1].map.vaule (line 6): unknown key",
				`sinks.out.key (line 7): expression "(": unexpected token EOF (1:1)`,
			}, inOrder: true},
		{name: "a duration in an operator spec needs a unit", args: []string{"validate", "-c", ttlBare}, code: 2,
			wantErr: []string{`steps[0].dedupe.ttl (line 4): a duration needs a unit: found 5; write "5s", "5ms" or "5m"`}},
		{name: "run with a bad file exits 2 before anything runs", args: []string{"run", "-c", bad}, code: 2,
			wantErr:    []string{"checkpoint.intervl", `steps[0].filter (line 6): expression "value.x >": unexpected token EOF`},
			notWantErr: []string{"broker started", "pipeline running"}},
		{name: "a missing file exits 2", args: []string{"validate", "-c", filepath.Join(t.TempDir(), "nope.yaml")}, code: 2,
			wantErr: []string{"nope.yaml"}},
		{name: "a missing -c exits 2", args: []string{"run"}, code: 2, wantErr: []string{"-c FILE is required"}},
		{name: "an unknown command exits 2", args: []string{"frobnicate"}, code: 2, wantErr: []string{`unknown command "frobnicate"`}},
		{name: "an unknown flag exits 2", args: []string{"validate", "--nope"}, code: 2, wantErr: []string{"flag provided but not defined"}},
		{name: "no command exits 2", args: nil, code: 2, wantErr: []string{"Usage:"}},
		{name: "version exits 0", args: []string{"version"}, code: 0, wantOut: []string{"pipeline dev (commit ", runtime.Version()}},
		{name: "broker with a bad port exits 2", args: []string{"broker", "--port", "70000"}, code: 2, wantErr: []string{"not a port"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errs)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			at := 0
			for _, w := range tc.wantErr {
				i := strings.Index(errs, w)
				switch {
				case i < 0:
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				case tc.inOrder && i < at:
					t.Errorf("stderr has %q out of line order:\n%s", w, errs)
				default:
					at = i
				}
			}
			for _, w := range tc.notWantErr {
				if strings.Contains(errs, w) {
					t.Errorf("stderr has %q:\n%s", w, errs)
				}
			}
		})
	}
}

// TestQuickStart runs the quick start as the README does, smaller, and
// checks the summary it prints.
func TestQuickStart(t *testing.T) {
	data, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(data), "records: 20000", "records: 5000", 1)
	if body == string(data) {
		t.Fatal("quickstart.yaml no longer has records: 20000; update the test")
	}
	code, out, errs := runCLI(t, "run", "-c", writeFile(t, body))
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	for _, w := range []string{"summary: 5000 records in, 5000 out (2 dead letters)", "sensor-alerts", "sensor-compact", "sensor-dlq                 2 records", "0 aborted"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// TestPerSensorExample runs examples/per-sensor.yaml as the README does,
// smaller and on an embedded broker the test can read afterwards, and
// checks every sensor's final count, maximum and mean against the readings
// the feeder wrote.
func TestPerSensorExample(t *testing.T) {
	data, err := os.ReadFile("../examples/per-sensor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	body := string(data)
	for old, new := range map[string]string{
		"records: 20000":    "records: 5000",
		"brokers: embedded": "brokers: [" + b.Addrs()[0] + "]",
	} {
		if !strings.Contains(body, old) {
			t.Fatalf("per-sensor.yaml no longer has %q; update the test", old)
		}
		body = strings.Replace(body, old, new, 1)
	}
	code, out, errs := runCLI(t, "run", "-c", writeFile(t, body))
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if w := "summary: 5000 records in, "; !strings.Contains(out, w) {
		t.Errorf("output lacks %q:\n%s", w, out)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func(topic string) []*kgo.Record {
		recs, err := offsets.ReadToEnd(ctx, cl, topic, true)
		if err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		return recs
	}
	type stats struct {
		Readings int     `json:"readings"`
		Hottest  float64 `json:"hottest"`
		Mean     float64 `json:"mean"`
	}
	want := map[string]*stats{}
	sums := map[string]float64{}
	broken := 0
	for _, r := range read("sensor-readings") {
		var in struct {
			Sensor      string  `json:"sensor"`
			Temperature float64 `json:"temperature"`
		}
		if json.Unmarshal(r.Value, &in) != nil {
			broken++
			continue
		}
		w := want[in.Sensor]
		if w == nil {
			w = &stats{Hottest: in.Temperature}
			want[in.Sensor] = w
		}
		w.Readings++
		w.Hottest = max(w.Hottest, in.Temperature)
		sums[in.Sensor] += in.Temperature
	}
	if len(want) != 20 || broken != 2 {
		t.Fatalf("the feeder wrote %d sensors and %d broken readings, want 20 and 2", len(want), broken)
	}
	// emit: checkpoint writes a sensor each checkpoint it changed in: its
	// last record holds its final figures.
	got := map[string]stats{}
	for _, r := range read("sensor-stats") {
		var s stats
		if err := json.Unmarshal(r.Value, &s); err != nil {
			t.Fatalf("sensor-stats %s: %v", r.Value, err)
		}
		got[string(r.Key)] = s
	}
	for sensor, w := range want {
		w.Mean = sums[sensor] / float64(w.Readings)
		g, ok := got[sensor]
		switch {
		case !ok:
			t.Errorf("%s: no output", sensor)
		case g.Readings != w.Readings || g.Hottest != w.Hottest || math.Abs(g.Mean-w.Mean) > 1e-9*w.Mean:
			t.Errorf("%s: got %+v, want %+v", sensor, g, *w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d sensors in the output, want %d", len(got), len(want))
	}
	if n := len(read("sensor-dlq")); n != broken {
		t.Errorf("%d dead letters, want %d", n, broken)
	}
}

// TestValidateReportsEveryProblemOnce checks the merged report of a file
// with both configuration and graph errors: all of them, in line order,
// and none twice although the graph is built from the broken file.
func TestValidateReportsEveryProblemOnce(t *testing.T) {
	path := writeFile(t, `name: v
brokers: [127.0.0.1:9]
sources: {in: {topics: [a], format: xml}}
steps:
  - {name: s, filter: "true"}
  - {name: s, map: {value: "("}}
  - {name: r, map: {}, split: {hot: x}}
  - {name: ok, from: in, split: {hot: "value.t >"}}
sinks:
  out: {from: r.hot, topic: b}
  more: {from: ok.hot, topic: c, headers: {"": value.x}}
  rest: {from: ok, topic: d, key_format: q}
`)
	code, _, errs := runCLI(t, "validate", "-c", path)
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d\n%s", code, ExitUsage, errs)
	}
	// The problems found by the configuration are at lines 3, 6, 7, 11
	// and 12; by the graph, at 6 and 8. Left out as already reported: the
	// graph's "unknown format" (line 3), duplicate step (6), unknown
	// operator for the step with two (7), and r.hot, an output of that
	// step (10).
	want := []string{
		`sources.in.format (line 3): must be one of json, string or bytes, found "xml"`,
		`steps[1].map.value (line 6): expression "(": unexpected token EOF (1:1)`,
		`steps[1].name (line 6): name "s" is already used by steps[0]; sources, steps and sinks share one namespace`,
		`steps[2] (line 7): one operator expected, found "map" and "split"`,
		`steps[3].split.hot (line 8): expression "value.t >": unexpected token EOF (1:9)`,
		`sinks.more.headers (line 11): a header name is empty`,
		`sinks.rest.key_format (line 12): must be one of string, json or bytes, found "q"`,
	}
	var got []string
	for _, l := range strings.Split(errs, "\n") {
		// Each problem starts "  path (line N): ..."; the caret lines of
		// an expression error follow it, indented further.
		if strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   ") {
			got = append(got, strings.TrimPrefix(l, "  "))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s\nstderr:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), errs)
	}

	// The Go API's front door reports the same problems in the same order.
	_, err := runner.Load(path, nil)
	var ce config.Errors
	if !errors.As(err, &ce) {
		t.Fatalf("runner.Load: %v, want config.Errors", err)
	}
	var fromGo []string
	for _, e := range ce {
		fromGo = append(fromGo, strings.SplitN(e.Error(), "\n", 2)[0])
	}
	if strings.Join(fromGo, "\n") != strings.Join(want, "\n") {
		t.Errorf("runner.Load:\n%s\nwant:\n%s", strings.Join(fromGo, "\n"), strings.Join(want, "\n"))
	}
}

// TestMisspeltEnvironmentVariableStopsTheRun checks that a PIPELINE_*
// variable naming no setting is a configuration error for validate and
// run alike, and that run starts nothing (this file would start the
// embedded broker).
func TestMisspeltEnvironmentVariableStopsTheRun(t *testing.T) {
	path := writeFile(t, "name: v\nbrokers: embedded\nsources: {in: {topics: [a]}}\nsinks: {out: {topic: b}}\n")
	t.Setenv("PIPELINE_CHECKPOINT_INTERVL", "5s")
	want := "PIPELINE_CHECKPOINT_INTERVL: unknown environment variable (did you mean PIPELINE_CHECKPOINT_INTERVAL?)"
	for _, cmd := range []string{"validate", "run"} {
		code, out, errs := runCLI(t, cmd, "-c", path)
		if code != ExitUsage || !strings.Contains(errs, want) {
			t.Errorf("%s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", cmd, code, ExitUsage, want, out, errs)
		}
		if strings.Contains(errs, "broker started") || strings.Contains(out, "summary") {
			t.Errorf("%s ran with a misspelt variable:\n%s%s", cmd, out, errs)
		}
	}

	// The variables the binary reads besides settings are not errors.
	os.Unsetenv("PIPELINE_CHECKPOINT_INTERVL")
	t.Setenv("PIPELINE_CRASH_AT", "before-commit:1000")
	t.Setenv("PIPELINE_TEST_LOG", "1")
	if code, out, errs := runCLI(t, "validate", "-c", path); code != ExitOK {
		t.Errorf("validate with PIPELINE_CRASH_AT and PIPELINE_TEST_LOG: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// brokenFile returns a pipeline file made of parts picked by rng, most of
// them broken in some way: for checking that a file with any mix of
// problems is reported, never crashes the builder.
func brokenFile(rng *rand.Rand) string {
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	heads := []string{
		"name: v\nbrokers: [127.0.0.1:9]\n",
		"brokers: kafka\n",
		"name: 'a b'\nbrokers: embedded\nproducer: {batch_max_bytes: -1}\naudit: {source_positions: true, enabled: false}\n",
		"",
		"name: x\nbrokers: embedded\naudit: {source_positions: true}\nstate: {backend: pebble}\ncheckpoint: {interval: 0s}\n",
	}
	sources := []string{
		"sources: {in: {topics: [a]}}\n",
		"sources: {in: {topics: [a], format: xml}, in2: {topics: a}}\n",
		"sources: 5\n",
		"sources: {'': {topics: ['']}, x.y: ~}\n",
		"",
		"sources: {in: {topics: [a]}, in2: {topics: [z]}}\n",
	}
	steps := []string{
		`{filter: "value.x >"}`, `{filter: ~}`, `{name: r, split: {hot: "value.t > 1"}}`, `{name: r, split: 3}`,
		`{name: r, route: [{a: x}, {b: "("}]}`, `{name: r, route: {a: "true"}}`, `{map: {key: value.k}}`, `{map: {}, filter: x}`,
		`{name: "a.b", flat_map: value.items}`, `{from: [r.hot, nowhere, in], union: {}}`, `{from: r.hot, map: {value: value}}`,
		`{key_by: ~}`, `{name: k, key_by: {key: value.k, partitions: -2}}`, `{name: k, from: k, filter: x}`,
		`{aggregate: {fields: {n: count, m: {max: value.t}}, emit: checkpoint}}`, `{aggregate: {fields: {n: {reduce: "(", init: 1}}}}`,
		`{aggregate: {fields: 3}}`, `{dedupe: {ttl: -1m}}`, `{dedupe: {ttl: 1m, id: value.x}}`, `{dedupe: ~}`,
		`{parallel: {workers: 2, aggregate: {fields: {n: count}}}}`, `{parallel: {workers: 0, parallel: {workers: 1, filter: x}}}`,
		`{parallel: {workers: 2, key_by: value.k}}`, `{name: r, parallel: {workers: 2, split: {hot: x}}}`, `{parallel: ~}`,
		`{name: r, frobnicate: 1}`, `filter`, `{}`, `{name: in, filter: x}`, `{from: {a: b}, map: {value: x}}`,
		`{map: {value: !!int "abc"}}`, `{from: [k, r.a, r.default, in2], union: {}}`, `{nmae: r, filter: x}`, `{union: ~}`,
		`{from: [], filter: x}`, `{from: "", filter: x}`, `{name: "", map: {value: x}}`,
	}
	sinks := []string{
		"out: {topic: b}", "out: {}", "out: {from: r.hot, topic: a}",
		`out2: {from: r.x, topic: c, key: "(", headers: {"": x, h: ~, pipeline.source: y}}`,
		`"a.b": {topic: d, format: zz, key_format: q, partitions: -1}`, "o: {from: k, topic: e, value: value}",
		"o3: output", "in: {topic: q}", "o4: {from: r, topic: f}", "o5: {from: '', topic: g}",
		"o6: {from: k.x, topic: h, brokers: [other:1]}",
	}
	tails := []string{"", "dead_letter: {topic: b}\n", "dead_letter: {topic: a}\n", "steps: 5\n", "topics: {configs: {'': x}}\n"}

	var b strings.Builder
	b.WriteString(pick(heads))
	b.WriteString(pick(sources))
	if n := rng.IntN(5); n > 0 {
		b.WriteString("steps:\n")
		for range n {
			fmt.Fprintf(&b, "  - %s\n", pick(steps))
		}
	}
	if n := rng.IntN(4); n > 0 {
		b.WriteString("sinks:\n")
		seen := make(map[string]bool)
		for range n {
			s := pick(sinks)
			if name, _, _ := strings.Cut(s, ":"); !seen[name] {
				seen[name] = true
				fmt.Fprintf(&b, "  %s\n", s)
			}
		}
	}
	b.WriteString(pick(tails))
	return b.String()
}

// checkBrokenFile runs validate's checks on doc and fails t unless every
// configuration problem is in the report, once.
func checkBrokenFile(t *testing.T, doc []byte) {
	t.Helper()
	noEnv := func(string) (string, bool) { return "", false }
	cfg, perr := config.Parse(doc, "f.yaml", noEnv)
	e := &env{reg: ops.NewRegistry()}
	gotCfg, g, err := e.checkConfig(cfg, perr)
	var ce config.Errors
	if !errors.As(perr, &ce) {
		if (err == nil) != (gotCfg != nil && g != nil) {
			t.Fatalf("checkConfig = %v, %v, %v: want a Config and a Graph exactly when there is no error\n%s", gotCfg, g, err, doc)
		}
		return
	}
	var all config.Errors
	if !errors.As(err, &all) {
		t.Fatalf("configuration errors became %T: %v\n%s", err, err, doc)
	}
	seen := make(map[string]bool)
	for _, x := range all {
		if seen[x.Error()] {
			t.Errorf("reported twice: %s\n%s", x.Error(), doc)
		}
		seen[x.Error()] = true
	}
	for _, x := range ce {
		if !seen[x.Error()] {
			t.Errorf("configuration error %q missing from the report:\n%v\n%s", x.Error(), err, doc)
		}
	}
}

// TestBrokenFilesAreReportedNotCrashed builds many files mixing broken
// parts: building the graph of a file the configuration rejected must
// never panic, drop a configuration error or report one twice.
func TestBrokenFilesAreReportedNotCrashed(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rejected := 0
	for range n {
		doc := brokenFile(rng)
		if _, err := config.Parse([]byte(doc), "f.yaml", func(string) (string, bool) { return "", false }); err != nil {
			rejected++
		}
		checkBrokenFile(t, []byte(doc))
		if t.Failed() {
			return
		}
	}
	// Most files must reach the merge, or this checks little.
	if rejected < n*9/10 {
		t.Errorf("only %d of %d files had configuration errors", rejected, n)
	}
}

// FuzzValidate looks for files that crash validate's checks; run it with
// go test -fuzz FuzzValidate ./cli/. Its seeds run with every go test.
func FuzzValidate(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add([]byte(brokenFile(rng)))
	}
	f.Fuzz(checkBrokenFile)
}

// TestHostileFilesGiveOneErrorLine runs validate on a file beyond the size
// limit and on an alias bomb: each is one line on stderr, exit 2.
func TestHostileFilesGiveOneErrorLine(t *testing.T) {
	var bomb strings.Builder
	bomb.WriteString("name: v\nbrokers: [127.0.0.1:9]\nsources: {in: {topics: [a]}}\nsteps:\n  - map:\n      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&bomb, "      l%d: &l%d [*l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d]\n", i, i, i-1)
	}
	bomb.WriteString("sinks: {out: {topic: b}}\n")
	tests := []struct{ name, body, want string }{
		{"a 9.4 MB file", "name: v\n" + strings.Repeat("# a comment line of padding\n", 350_000),
			"the file is 9800008 bytes; a pipeline file may be at most 1048576 bytes (1 MiB)"},
		{"an alias bomb", bomb.String(), "line 10: the document is too large once its aliases are expanded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(t, "validate", "-c", writeFile(t, tc.body))
			lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
			if code != ExitUsage || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || out != "" {
				t.Fatalf("exit %d, want %d and one line with %q\nstdout: %s\nstderr (%d lines): %.3000s", code, ExitUsage, tc.want, out, len(lines), errs)
			}
		})
	}
}
