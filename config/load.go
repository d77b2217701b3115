package config

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/viper"
)

// Load reads the YAML file at path, applies PIPELINE_* environment
// overrides and defaults, and validates the result. See Parse.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > MaxFileSize {
		return nil, tooLarge(path, st.Size())
	}
	// One byte more than the limit tells a file at the limit from a
	// longer one that Stat could not size (a pipe), without reading it all.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("parsing %s: the file is larger than %d bytes, the most a pipeline file may be (1 MiB)", path, MaxFileSize)
	}
	return Parse(data, path, nil)
}

func tooLarge(name string, size int64) error {
	return fmt.Errorf("parsing %s: the file is %d bytes; a pipeline file may be at most %d bytes (1 MiB)", name, size, MaxFileSize)
}

// Parse is Load for the bytes of a file; name (usually the file name) is
// used in messages. env looks up environment variables; nil means the
// process environment (os.LookupEnv).
//
// An unreadable document (larger than MaxFileSize, a YAML syntax error,
// several documents, a top level that is not a mapping, more than 100000
// values once its aliases are expanded) is a plain error naming name and the line,
// and the Config is nil. Otherwise every problem found is returned
// together as Errors, sorted by line: unknown keys, values of the wrong
// type, PIPELINE_* variables that are not settings, and what Validate
// reports. With Errors, the Config is also returned, filled as far as the
// file allowed: it is for finding further problems (see Reported), never
// for running.
//
// Only the process environment can be listed, so PIPELINE_* variables
// that name no setting (a misspelt PIPELINE_CHECKPOINT_INTERVL) are
// reported only when env is nil.
func Parse(data []byte, name string, env func(string) (string, bool)) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, tooLarge(name, int64(len(data)))
	}
	if env == nil {
		return parse(data, name, processEnv())
	}
	return parse(data, name, environment{lookup: env})
}

func parse(data []byte, name string, env environment) (*Config, error) {
	doc, err := parseDocument(data, name)
	if err != nil {
		return nil, err
	}
	t := newTree()
	root := t.build(doc, "")
	if t.over != nil {
		// What follows the limit was not read: reporting it would be
		// noise, as would the rules it breaks.
		return nil, fmt.Errorf("parsing %s: %w", name, t.over)
	}
	c := &Config{lines: t.lines, env: make(map[string]string)}
	r := &reader{tree: t, c: c, bad: make(map[string]bool)}
	for _, e := range t.errs {
		r.bad[e.Path] = true
	}

	r.checkSections(root)
	r.settings(root, env.viperLookup())
	r.environment(env)
	r.sources(root.get("sources"))
	r.steps(root.get("steps"))
	r.sinks(root.get("sinks"))
	r.topicConfigs(root.at("topics.configs"))
	r.topicCreates(root.at("topics.create"))
	r.deadLetterCluster(root.get("dead_letter"))
	c.setDefaults(root.get("demo") != nil)

	errs := append(Errors(r.errs), c.validate(r.reported)...)
	if len(errs) > 0 {
		errs.sort()
		for _, e := range errs {
			r.bad[e.Path] = true
		}
		c.reported = r.bad
		return c, errs
	}
	return c, nil
}

// reported reports whether a problem was already found at path or above
// it: "sources.a is not a mapping" makes "sources.a.topics: required" noise.
func (r *reader) reported(path string) bool {
	for p := path; p != ""; p = parentPath(p) {
		if r.bad[p] {
			return true
		}
	}
	return false
}

// newViper returns a viper holding the file's scalar settings, the
// defaults and the environment overrides. With lookup nil, viper reads the
// process environment itself; otherwise the variables lookup finds are set
// on it explicitly, since viper cannot be given another environment.
func newViper(all []setting, file map[string]any, lookup func(string) (string, bool)) *viper.Viper {
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	for _, s := range all {
		if s.def != nil {
			v.SetDefault(s.key, s.def)
		}
	}
	if err := v.MergeConfigMap(file); err != nil {
		panic(err) // MergeConfigMap cannot fail; it returns an error for symmetry
	}
	if lookup == nil {
		v.AutomaticEnv()
		// Bound explicitly: AutomaticEnv alone only finds the variables of
		// keys viper already knows from the file or a default.
		for _, s := range all {
			_ = v.BindEnv(s.key) // fails only without a key
		}
		return v
	}
	for _, s := range all {
		if val, ok := lookup(envVar(s.key)); ok && val != "" {
			v.Set(s.key, val)
		}
	}
	return v
}

// setDefaults fills in the defaults that depend on other settings. demo
// says whether the file has a demo section.
func (c *Config) setDefaults(demo bool) {
	if c.InstanceID == "" {
		c.InstanceID, _ = os.Hostname() // Validate reports it if still empty
	}
	if c.Group == "" {
		c.Group = c.Name
	}
	if c.Transactions.IDPrefix == "" {
		c.Transactions.IDPrefix = c.Name
	}
	if c.Audit.Topic == "" && c.Name != "" {
		c.Audit.Topic = c.Name + "-progress"
	}
	if c.TLS.CAFile != "" || c.TLS.CertFile != "" || c.TLS.KeyFile != "" {
		c.TLS.Enabled = true
	}
	c.SASL.Mechanism = strings.ToUpper(c.SASL.Mechanism)

	if !demo && !c.fromEnv("demo.") {
		c.Demo = Demo{}
	}

	for i := range c.Sources {
		s := &c.Sources[i]
		s.Format = or(s.Format, "json")
		s.KeyFormat = or(s.KeyFormat, "string")
	}
	for i := range c.Steps {
		s := &c.Steps[i]
		if s.Name == "" {
			s.Name = fmt.Sprintf("%s%d", or(s.Kind, "step"), i+1)
		}
	}
	for i := range c.Steps {
		s := &c.Steps[i]
		switch {
		case len(s.From) > 0:
		case i > 0:
			s.From = []string{c.Steps[i-1].Name}
		case len(c.Sources) == 1:
			s.From = []string{c.Sources[0].Name}
		}
	}
	for i := range c.Sinks {
		s := &c.Sinks[i]
		s.Format = or(s.Format, "json")
		s.KeyFormat = or(s.KeyFormat, "string")
		switch {
		case s.From != "":
		case len(c.Steps) > 0:
			s.From = c.Steps[len(c.Steps)-1].Name
		case len(c.Sources) == 1:
			s.From = c.Sources[0].Name
		}
	}
}

// fromEnv reports whether a setting whose key starts with prefix was set
// by an environment variable.
func (c *Config) fromEnv(prefix string) bool {
	for k := range c.env {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// MaxFileSize is the largest pipeline file Load and Parse read, 1 MiB: a
// pipeline of a thousand steps is a tenth of that.
const MaxFileSize = 1 << 20
