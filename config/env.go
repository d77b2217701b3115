package config

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// environment is where PIPELINE_* variables come from.
type environment struct {
	lookup func(string) (string, bool) // nil: the process environment, which viper reads itself
	names  []string                    // every variable's name, when listed
	listed bool                        // names is the whole environment, so unknown names can be found
}

// processEnv returns the process environment, listed.
func processEnv() environment {
	vars := os.Environ()
	names := make([]string, 0, len(vars))
	for _, kv := range vars {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return environment{names: names, listed: true}
}

// viperLookup returns the lookup function newViper and reader.settings
// take: nil for the process environment.
func (e environment) viperLookup() func(string) (string, bool) { return e.lookup }

func (e environment) get(name string) (string, bool) {
	if e.lookup == nil {
		return os.LookupEnv(name)
	}
	return e.lookup(name)
}

// otherVars are the PIPELINE_* variables that are not settings but are
// read by the binary or its tests; they are not reported as unknown.
var otherVars = []string{
	"PIPELINE_CRASH_AT", // cli: the crash drill of `pipeline run` (docs/exactly-once.md)
	"PIPELINE_TEST_LOG", // pipeline tests: log to stderr; child processes of tests inherit it
}

// shapeKeys are the parts of the file that cannot come from the
// environment: they are the pipeline's shape, not a deployment's.
var shapeKeys = []string{"sources", "steps", "sinks", "topics.configs", "topics.create"}

// environment reports the PIPELINE_* variables of env that set nothing: a
// misspelt name must not leave the setting it meant at its default
// unnoticed. Names are compared in upper case, so "pipeline_name" is
// reported too (viper reads upper-case names only). Variables set to the
// empty string are ignored, as for settings.
func (r *reader) environment(env environment) {
	if !env.listed {
		return
	}
	known := make(map[string]bool)
	var candidates []string // lower case, without the prefix: what suggest compares
	var sections []string   // "checkpoint_", "tls_", ...: the first part of dotted settings
	for _, s := range r.c.settings() {
		if sec, _, ok := strings.Cut(s.key, "."); ok && !slices.Contains(sections, sec+"_") {
			sections = append(sections, sec+"_")
		}
		known[envVar(s.key)] = true
		candidates = append(candidates, strings.ToLower(strings.TrimPrefix(envVar(s.key), envPrefix+"_")))
	}
	for _, v := range otherVars {
		known[v] = true
		candidates = append(candidates, strings.ToLower(strings.TrimPrefix(v, envPrefix+"_")))
	}
	names := slices.Clone(env.names)
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		upper := strings.ToUpper(name)
		rest, ok := strings.CutPrefix(upper, envPrefix+"_")
		if !ok || known[name] {
			continue
		}
		if val, _ := env.get(name); val == "" {
			continue
		}
		rest = strings.ToLower(rest)
		if key := shapeKey(rest); key != "" {
			r.fail(&FieldError{Path: name, Msg: fmt.Sprintf("%s cannot be set from the environment: it is the pipeline's shape and belongs in the file", key)})
			continue
		}
		if s := suggest(rest, candidates); s != "" {
			r.fail(&FieldError{Path: name, Msg: fmt.Sprintf("unknown environment variable (did you mean %s?)", envPrefix+"_"+strings.ToUpper(s))})
			continue
		}
		if !inSection(rest, sections) {
			// Near no setting and in none of their sections: another
			// program's variable (CI systems set PIPELINE_WORKSPACE, for
			// one), not a typo of ours.
			continue
		}
		r.fail(&FieldError{Path: name, Msg: "unknown environment variable: no setting has this name " +
			"(a setting's variable is PIPELINE_ and its path in upper case with \"_\" for \".\", such as PIPELINE_CHECKPOINT_INTERVAL)"})
	}
}

// shapeKey returns the key of shapeKeys that rest (a variable's name after
// the prefix, lower case) is or is below, or "".
func shapeKey(rest string) string {
	for _, k := range shapeKeys {
		v := strings.ReplaceAll(k, ".", "_")
		if rest == v || strings.HasPrefix(rest, v+"_") {
			return k
		}
	}
	return ""
}

// inSection reports whether rest (a variable's name after the prefix, lower
// case) is in one of the settings' sections.
func inSection(rest string, sections []string) bool {
	for _, sec := range sections {
		if strings.HasPrefix(rest, sec) {
			return true
		}
	}
	return false
}
