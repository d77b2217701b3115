package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipeline-run/pipeline/pipeline"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{reg: pipeline.NewRegistry(), stdout: &out, stderr: &errb}
	code = e.main(context.Background(), args)
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
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string
		wantErr    []string
		notWantErr []string
	}{
		{name: "validate prints the graph of a valid file", args: []string{"validate", "-c", valid}, code: 0,
			wantOut: []string{"v: valid: source in[a] | sink out<-in->b"}},
		{name: "validate reports every config error with its path and exits 2", args: []string{"validate", "-c", bad}, code: 2,
			wantErr: []string{`checkpoint.intervl (line 3): unknown key (did you mean "interval"?)`, "sinks.out.topic (line 7): required"}},
		{name: "validate reports every graph error with its path and exits 2", args: []string{"validate", "-c", badGraph}, code: 2,
			wantErr: []string{"steps[0].filter (line 5)", "steps[1].map.vaule", "sinks.out.key"}},
		{name: "run with a bad file exits 2 before anything runs", args: []string{"run", "-c", bad}, code: 2,
			wantErr: []string{"checkpoint.intervl"}, notWantErr: []string{"broker started", "pipeline running"}},
		{name: "a missing file exits 2", args: []string{"validate", "-c", filepath.Join(t.TempDir(), "nope.yaml")}, code: 2,
			wantErr: []string{"nope.yaml"}},
		{name: "a missing -c exits 2", args: []string{"run"}, code: 2, wantErr: []string{"-c FILE is required"}},
		{name: "an unknown command exits 2", args: []string{"frobnicate"}, code: 2, wantErr: []string{`unknown command "frobnicate"`}},
		{name: "an unknown flag exits 2", args: []string{"validate", "--nope"}, code: 2, wantErr: []string{"flag provided but not defined"}},
		{name: "no command exits 2", args: nil, code: 2, wantErr: []string{"Usage:"}},
		{name: "version exits 0", args: []string{"version"}, code: 0, wantOut: []string{"pipeline dev"}},
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
			for _, w := range tc.wantErr {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
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
