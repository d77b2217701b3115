package config

import (
	"errors"
	"strings"
	"testing"
)

// base is the smallest valid configuration; withBase puts a test's
// top-level sections in place of base's.
const base = `name: p
brokers: [localhost:9092]
sources:
  in: {topics: [input]}
sinks:
  out: {topic: output}
`

// withBase returns base with each top-level key of override replacing the
// same key of base (in base's place), and new keys appended.
func withBase(override string) string {
	blocks := func(doc string) (keys []string, text map[string]string) {
		text = make(map[string]string)
		var key string
		for _, line := range strings.SplitAfter(doc, "\n") {
			if line == "" {
				continue
			}
			if line[0] != ' ' && line[0] != '#' && line[0] != '-' {
				key, _, _ = strings.Cut(line, ":")
				keys = append(keys, key)
			}
			text[key] += line
		}
		return keys, text
	}
	if !strings.HasSuffix(override, "\n") {
		override += "\n"
	}
	baseKeys, baseText := blocks(base)
	keys, text := blocks(override)
	var b strings.Builder
	for _, k := range baseKeys {
		if t, ok := text[k]; ok {
			b.WriteString(t)
			delete(text, k)
		} else {
			b.WriteString(baseText[k])
		}
	}
	for _, k := range keys {
		b.WriteString(text[k])
	}
	return b.String()
}

// noEnv is an empty environment, so that tests do not depend on the
// process's.
func noEnv(string) (string, bool) { return "", false }

// envOf returns an environment holding vars.
func envOf(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// listedEnv returns an environment holding vars that, like the process
// environment, can be listed, so that unknown PIPELINE_* names are found.
func listedEnv(vars map[string]string) environment {
	e := environment{lookup: envOf(vars), listed: true}
	for name := range vars {
		e.names = append(e.names, name)
	}
	return e
}

// mustParse parses doc in an empty environment and fails on any error.
func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc), "test.yaml", noEnv)
	if err != nil {
		t.Fatalf("Parse:\n%v\ndocument:\n%s", err, doc)
	}
	return c
}

// fieldErrors returns err's problems, failing unless err is Errors.
func fieldErrors(t *testing.T, err error) Errors {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v (%T) is not config.Errors", err, err)
	}
	return errs
}

func TestWithBaseReplacesTopLevelKeys(t *testing.T) {
	got := withBase("sinks:\n  x: {topic: y}\nlog: {level: debug}\n")
	want := "name: p\nbrokers: [localhost:9092]\nsources:\n  in: {topics: [input]}\nsinks:\n  x: {topic: y}\nlog: {level: debug}\n"
	if got != want {
		t.Errorf("withBase = %q, want %q", got, want)
	}
}
