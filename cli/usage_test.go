package cli

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUsage checks the command line's own errors and help: every bad
// flag value is a usage error naming what is valid, and every -h prints
// the help of what it follows and exits 0.
func TestUsage(t *testing.T) {
	embedded := writeFile(t, "name: v\nbrokers: embedded\nsources: {in: {topics: [a]}}\nsinks: {out: {topic: b}}\n")
	stateful := writeFile(t, `name: v
brokers: [127.0.0.1:9]
sources: {in: {topics: [a]}}
steps:
  - {name: per_key, aggregate: {fields: {n: count}}}
  - {name: other, from: in, dedupe: {ttl: 1m}}
sinks: {out: {from: per_key, topic: b}, out2: {from: other, topic: c}}
`)
	levels := `must be one of debug, info, warn or error`
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		code      int
		stdout    []string // each must appear
		notStdout []string
		stderr    []string
		notStderr []string
	}{
		{name: "run refuses an unknown log level before anything runs", args: []string{"run", "-c", embedded, "--log-level", "verbose"},
			code: 2, stderr: []string{`--log-level "verbose": ` + levels}, notStderr: []string{"broker started"}},
		{name: "broker refuses an unknown log level", args: []string{"broker", "--port", "0", "--log-level", "verbose"},
			code: 2, stderr: []string{`--log-level "verbose": ` + levels}, notStderr: []string{"listening"}},
		{name: "offsets show -h lists only its own flags", args: []string{"offsets", "show", "-h"},
			code: 0, stdout: []string{"Usage: pipeline offsets show", "-c file", "-format"}, notStdout: []string{"-to"}},
		{name: "offsets reset -h lists --to", args: []string{"offsets", "reset", "-h"},
			code: 0, stdout: []string{"Usage: pipeline offsets reset", "-to"}, notStdout: []string{"-format"}},
		{name: "a duration flag needs a unit", args: []string{"transactions", "hanging", "-c", embedded, "--older-than", "5"},
			code: 2, stderr: []string{`transactions hanging: invalid value "5" for flag -older-than: a duration needs a unit`}},
		{name: "offsets -h lists the subcommands", args: []string{"offsets", "-h"},
			code: 0, stdout: []string{"pipeline offsets show -c FILE", "pipeline offsets reset -c FILE --to earliest|latest"}},
		{name: "transactions --help lists the subcommands", args: []string{"transactions", "--help"},
			code: 0, stdout: []string{"pipeline transactions hanging -c FILE"}},
		{name: "state -h lists the subcommands", args: []string{"state", "-h"},
			code: 0, stdout: []string{"pipeline state reset -c FILE --step NAME"}},
		{name: "a group without a subcommand is a usage error with the help", args: []string{"offsets"},
			code: 2, stderr: []string{"pipeline offsets show -c FILE", "offsets: a subcommand is required: show or reset"}},
		{name: "an unknown subcommand is named", args: []string{"state", "wipe"},
			code: 2, stderr: []string{`state: unknown subcommand "wipe"`}},
		{name: "version --help prints the help of version", args: []string{"version", "--help"},
			code: 0, stdout: []string{"Usage: pipeline version"}, notStdout: []string{"pipeline dev"}},
		{name: "version -h prints the help of version", args: []string{"version", "-h"},
			code: 0, stdout: []string{"Usage: pipeline version"}, notStdout: []string{"pipeline dev"}},
		{name: "run -h prints its help on stdout", args: []string{"run", "-h"},
			code: 0, stdout: []string{"Usage: pipeline run -c FILE", "-log-level"}},
		{name: "an unknown flag says how to get help", args: []string{"validate", "--nope"},
			code: 2, stderr: []string{"validate: flag provided but not defined: -nope (see pipeline validate -h)"}},
		{name: "state reset without --step lists the stateful steps", args: []string{"state", "reset", "-c", stateful},
			code: 2, stderr: []string{"state reset: --step is required: the stateful steps of this pipeline are per_key and other"}, notStderr: []string{`""`}},
		{name: "state reset with a step that is not stateful lists them", args: []string{"state", "reset", "-c", stateful, "--step", "nope"},
			code: 2, stderr: []string{`state reset: --step "nope" is not a stateful step of this pipeline; its stateful steps are per_key and other`}},
		{name: "validate checks PIPELINE_CRASH_AT as run does", args: []string{"validate", "-c", embedded}, env: map[string]string{"PIPELINE_CRASH_AT": "sometime"},
			code: 2, stderr: []string{`PIPELINE_CRASH_AT: "sometime" is not a crash point: want before-commit:N or after-commit:N, N from 1`}, notStderr: []string{"valid:"}},
		{name: "run checks PIPELINE_CRASH_AT before anything runs", args: []string{"run", "-c", embedded}, env: map[string]string{"PIPELINE_CRASH_AT": "before-commit:0"},
			code: 2, stderr: []string{`PIPELINE_CRASH_AT: "before-commit:0" is not a crash point: want before-commit:N or after-commit:N, N from 1`}, notStderr: []string{"broker started"}},
		{name: "validate accepts a valid PIPELINE_CRASH_AT", args: []string{"validate", "-c", embedded}, env: map[string]string{"PIPELINE_CRASH_AT": "after-commit:3"},
			code: 0, stdout: []string{"v: valid:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			// A command that should have refused to start would run
			// until stopped: stop it, so that the test fails rather
			// than hangs.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code, out, errs := runCLIContext(t, ctx, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errs)
			}
			check := func(stream, text string, want []string, present bool) {
				for _, w := range want {
					if strings.Contains(text, w) != present {
						t.Errorf("%s has %q: %v, want %v:\n%s", stream, w, !present, present, text)
					}
				}
			}
			check("stdout", out, tc.stdout, true)
			check("stdout", out, tc.notStdout, false)
			check("stderr", errs, tc.stderr, true)
			check("stderr", errs, tc.notStderr, false)
		})
	}
}
