package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// reader fills a Config from the value tree, collecting every problem.
type reader struct {
	*tree
	c   *Config
	bad map[string]bool // paths with a problem already, so Validate does not repeat it
}

func (r *reader) fail(e *FieldError) {
	r.errs = append(r.errs, e)
	r.bad[e.Path] = true
}

// errorf records a problem at path, on the line of path or of the nearest
// enclosing key in the file (or naming the environment variable).
func (r *reader) errorf(path, format string, args ...any) {
	r.fail(r.c.fieldError(path, fmt.Sprintf(format, args...)))
}

// mapping reports whether v is a mapping, and reports its keys that are not
// in known (nil for a map of user-chosen names). A null is an empty mapping;
// anything else is reported as not being what, such as "a mapping of ...".
func (r *reader) mapping(v *value, what string, known []string) bool {
	if v.null() {
		return false
	}
	if v.kind != yaml.MappingNode {
		r.errorf(v.path, "expected %s, found %s", what, v.describe())
		return false
	}
	if known == nil {
		return true
	}
	for _, p := range v.pairs {
		if slices.Contains(known, p.key) {
			continue
		}
		path := joinPath(v.path, p.key)
		s := suggest(p.key, known)
		if s == "" {
			r.errorf(path, "unknown key (known keys: %s)", strings.Join(known, ", "))
			continue
		}
		r.errorf(path, "unknown key (did you mean %q?)", s)
		if v.get(s) == nil {
			// The misspelt key is the one a rule would now call missing
			// ("sources.x.topics: required"); one message is enough.
			r.bad[joinPath(v.path, s)] = true
		}
	}
	return true
}

// checkSections reports unknown keys at the top level and in the sections
// of scalar settings, and sections that are not mappings.
func (r *reader) checkSections(root *value) {
	r.mapping(root, "a mapping", knownKeys(""))
	for _, p := range root.pairs {
		if isSection(p.key) {
			r.mapping(p.val, "a mapping of "+p.key+" settings", knownKeys(p.key))
		}
	}
}

// str returns the text of a scalar, "" for null, and reports anything else.
func (r *reader) str(v *value) string {
	if v.null() {
		return ""
	}
	if v.kind != yaml.ScalarNode {
		r.errorf(v.path, "expected a string, found %s", v.describe())
		return ""
	}
	return v.node.Value
}

// strs returns a list of strings, accepting a single string for a list of
// one.
func (r *reader) strs(v *value) []string {
	if v.null() {
		return nil
	}
	if v.kind == yaml.ScalarNode {
		return []string{v.node.Value}
	}
	if v.kind != yaml.SequenceNode {
		r.errorf(v.path, "expected a string or a list of strings, found %s", v.describe())
		return nil
	}
	var out []string
	for _, item := range v.items {
		if item.kind != yaml.ScalarNode || item.null() {
			r.errorf(item.path, "expected a string, found %s", item.describe())
			continue
		}
		out = append(out, item.node.Value)
	}
	return out
}

// stringMap returns a mapping of strings to strings.
func (r *reader) stringMap(v *value, what string) map[string]string {
	if !r.mapping(v, what, nil) {
		return nil
	}
	out := make(map[string]string, len(v.pairs))
	for _, p := range v.pairs {
		out[p.key] = r.str(p.val)
	}
	return out
}

// int32 returns a whole number that fits in 32 bits, 0 for null.
func (r *reader) int32(v *value) int32 {
	s := r.str(v)
	if s == "" {
		return 0
	}
	n, err := parseInt(s, 32)
	if err != nil {
		r.errorf(v.path, "%v", err)
	}
	return int32(n)
}

// settings reads the scalar settings through viper: the file's values,
// overridden by PIPELINE_* variables, over the defaults. lookup is nil for
// the process environment.
func (r *reader) settings(root *value, lookup func(string) (string, bool)) {
	all := r.c.settings()
	file := make(map[string]any)
	for _, s := range all {
		v := root.at(s.key)
		if v.null() {
			continue
		}
		if raw, ok := r.raw(s, v); ok {
			setNested(file, s.key, raw)
		}
	}

	v := newViper(all, file, lookup)
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, s := range all {
		if val, ok := lookup(envVar(s.key)); ok && val != "" { // viper ignores empty variables too
			r.c.env[s.key] = envVar(s.key)
		}
	}
	for _, s := range all {
		if err := assign(s.ptr, v.Get(s.key)); err != nil {
			r.errorf(s.key, "%v", err)
			_ = assign(s.ptr, s.def) // so that Validate does not report it again under another rule
		}
	}
}

// raw returns the file's value for s as viper should hold it: the text of
// a scalar (so that file and environment values are parsed alike), or a
// list of texts for brokers.
func (r *reader) raw(s setting, v *value) (any, bool) {
	if _, ok := s.ptr.(*Brokers); ok && v.kind == yaml.SequenceNode {
		addrs := r.strs(v)
		return addrs, true
	}
	if v.kind != yaml.ScalarNode {
		r.errorf(v.path, "expected %s, found %s", expected(s.ptr), v.describe())
		return nil, false
	}
	return v.node.Value, true
}

// expected names what a setting holds, for messages.
func expected(ptr any) string {
	switch ptr.(type) {
	case *bool:
		return "true or false"
	case *int, *int16, *int32, *int64:
		return "a whole number"
	case *time.Duration:
		return durationHint
	case *Brokers:
		return `a list of host:port addresses or "embedded"`
	}
	return "a string"
}

func setNested(m map[string]any, key string, val any) {
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		sub, ok := m[p].(map[string]any)
		if !ok {
			sub = make(map[string]any)
			m[p] = sub
		}
		m = sub
	}
	m[parts[len(parts)-1]] = val
}

// assign stores raw, a string (from the file or the environment), a list
// of strings (brokers from the file) or a default of the right type, in
// ptr. nil leaves ptr alone.
func assign(ptr, raw any) error {
	if raw == nil {
		return nil
	}
	dst := reflect.ValueOf(ptr).Elem()
	if reflect.TypeOf(raw) == dst.Type() {
		dst.Set(reflect.ValueOf(raw))
		return nil
	}
	if p, ok := ptr.(*Brokers); ok {
		b, err := parseBrokers(raw)
		*p = b
		return err
	}
	s, ok := raw.(string)
	if !ok {
		return fmt.Errorf("expected %s, found %v", expected(ptr), raw)
	}
	switch p := ptr.(type) {
	case *string:
		*p = s
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("expected true or false, found %q", s)
		}
		*p = b
	case *time.Duration:
		d, err := ParseDuration(s)
		if err != nil {
			return err
		}
		*p = d
	case *int:
		n, err := parseInt(s, strconv.IntSize)
		*p = int(n)
		return err
	case *int16:
		n, err := parseInt(s, 16)
		*p = int16(n)
		return err
	case *int32:
		n, err := parseInt(s, 32)
		*p = int32(n)
		return err
	case *int64:
		n, err := parseInt(s, 64)
		*p = n
		return err
	default:
		panic(fmt.Sprintf("config: setting of unsupported type %T", ptr)) // a mistake in settings()
	}
	return nil
}

func parseInt(s string, bits int) (int64, error) {
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, bits)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("%s is out of range (at most %d)", s, int64(1)<<(bits-1)-1)
		}
		return 0, fmt.Errorf("expected a whole number, found %q", s)
	}
	return n, nil
}

// parseBrokers reads "embedded", a comma-separated list of addresses, or a
// list of addresses (possibly just "embedded").
func parseBrokers(raw any) (Brokers, error) {
	var list []string
	switch r := raw.(type) {
	case string:
		list = strings.Split(r, ",")
	case []string:
		list = r
	case []any:
		for _, x := range r {
			list = append(list, fmt.Sprint(x))
		}
	default:
		return Brokers{}, fmt.Errorf("expected %s, found %v", expected(&Brokers{}), raw)
	}
	var b Brokers
	for _, a := range list {
		if a = strings.TrimSpace(a); a != "" {
			b.Addrs = append(b.Addrs, a)
		}
	}
	if len(b.Addrs) == 1 && strings.EqualFold(b.Addrs[0], "embedded") {
		return Brokers{Embedded: true}, nil
	}
	return b, nil
}

var sourceKeys = append([]string{"topics", "format", "key_format", "event_time"}, clusterKeys...)

var eventTimeKeys = []string{"from", "max_out_of_orderness", "idle_timeout"}

// sources reads the `sources:` map, sorted by name.
func (r *reader) sources(v *value) {
	if !r.mapping(v, "a mapping of source names to sources", nil) {
		return
	}
	for _, p := range v.pairs {
		s := Source{Name: p.key, Path: p.val.path}
		if r.mapping(p.val, "a mapping such as {topics: [...]}", sourceKeys) {
			for _, f := range p.val.pairs {
				switch f.key {
				case "topics":
					s.Topics = r.strs(f.val)
				case "format":
					s.Format = r.str(f.val)
				case "key_format":
					s.KeyFormat = r.str(f.val)
				case "event_time":
					s.EventTime = r.eventTime(f.val)
				case "brokers", "bootstrap", "cluster": // clusterKeys
					r.cluster(f.val)
				}
			}
		}
		r.c.Sources = append(r.c.Sources, s)
	}
	slices.SortFunc(r.c.Sources, func(a, b Source) int { return strings.Compare(a.Name, b.Name) })
}

// eventTime reads a source's event_time: {from, max_out_of_orderness,
// idle_timeout}, or a bare string for from alone.
func (r *reader) eventTime(v *value) *EventTime {
	if v.null() {
		return nil
	}
	et := &EventTime{Path: v.path}
	if v.kind == yaml.ScalarNode {
		et.From = v.node.Value
		return et
	}
	if !r.mapping(v, "a mapping such as {from: value.ts, max_out_of_orderness: 5s}", eventTimeKeys) {
		return et
	}
	dur := func(v *value) time.Duration {
		s := r.str(v)
		if s == "" {
			return 0
		}
		d, err := ParseDuration(s)
		if err != nil {
			r.errorf(v.path, "%v", err)
			return 0
		}
		return d
	}
	for _, f := range v.pairs {
		switch f.key {
		case "from":
			et.From = r.str(f.val)
		case "max_out_of_orderness":
			et.MaxOutOfOrderness = dur(f.val)
		case "idle_timeout":
			et.IdleTimeout = dur(f.val)
		}
	}
	return et
}

var sinkKeys = append([]string{"from", "topic", "key", "value", "headers", "format", "key_format", "partitions"}, clusterKeys...)

// sinks reads the `sinks:` map, sorted by name.
func (r *reader) sinks(v *value) {
	if !r.mapping(v, "a mapping of sink names to sinks", nil) {
		return
	}
	for _, p := range v.pairs {
		s := Sink{Name: p.key, Path: p.val.path}
		if r.mapping(p.val, "a mapping such as {topic: ...}", sinkKeys) {
			for _, f := range p.val.pairs {
				switch f.key {
				case "from":
					s.From = r.str(f.val)
				case "topic":
					s.Topic = r.str(f.val)
				case "key":
					s.Key = r.str(f.val)
				case "value":
					s.Value = r.str(f.val)
				case "headers":
					s.Headers = r.stringMap(f.val, "a mapping of header names to expressions")
				case "format":
					s.Format = r.str(f.val)
				case "key_format":
					s.KeyFormat = r.str(f.val)
				case "partitions":
					s.Partitions = r.int32(f.val)
				case "brokers", "bootstrap", "cluster": // clusterKeys
					r.cluster(f.val)
				}
			}
		}
		r.c.Sinks = append(r.c.Sinks, s)
	}
	slices.SortFunc(r.c.Sinks, func(a, b Sink) int { return strings.Compare(a.Name, b.Name) })
}

// steps reads the `steps:` list: each a mapping of name, from and one
// operator key, whose value is kept as plain Go values for the operator.
func (r *reader) steps(v *value) {
	if v.null() {
		return
	}
	if v.kind != yaml.SequenceNode {
		r.errorf(v.path, "expected a list of steps, found %s", v.describe())
		return
	}
	for i, item := range v.items {
		s := Step{Path: fmt.Sprintf("steps[%d]", i)}
		if item.kind != yaml.MappingNode {
			r.errorf(s.Path, "expected a mapping with one operator key, such as {filter: ...}, found %s", item.describe())
			r.c.Steps = append(r.c.Steps, s)
			continue
		}
		var ops []pair
		for _, p := range item.pairs {
			switch p.key {
			case "name":
				s.Name = r.str(p.val)
			case "from":
				s.From = r.strs(p.val)
			default:
				ops = append(ops, p)
			}
		}
		if len(ops) > 1 {
			// {nmae: x, map: ...} is a misspelt name, not two operators.
			ops = slices.DeleteFunc(ops, func(p pair) bool {
				if s := suggest(p.key, []string{"name", "from"}); s != "" {
					r.errorf(joinPath(item.path, p.key), "unknown key (did you mean %q?)", s)
					return true
				}
				return false
			})
		}
		switch len(ops) {
		case 0:
			r.errorf(s.Path, "one operator expected, found none (a step is {name: ..., from: ..., <kind>: <spec>})")
		case 1:
			s.Kind = ops[0].key
			spec, err := plain(ops[0].val)
			if err != nil {
				r.fail(err.(*FieldError))
			}
			s.Spec = spec
		default:
			names := make([]string, len(ops))
			for j, op := range ops {
				names[j] = strconv.Quote(op.key)
			}
			r.errorf(s.Path, "one operator expected, found %s and %s",
				strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
		}
		r.c.Steps = append(r.c.Steps, s)
	}
}

// deadLetterCluster reads the cluster keys under dead_letter; the rest of
// dead_letter is settings.
func (r *reader) deadLetterCluster(v *value) {
	if v == nil || v.kind != yaml.MappingNode {
		return
	}
	for _, p := range v.pairs {
		if slices.Contains(clusterKeys, p.key) {
			r.cluster(p.val)
		}
	}
}

// clusterRef is a brokers (bootstrap, cluster) key under a source, a sink
// or dead_letter: allowed only when it repeats the top-level brokers.
type clusterRef struct {
	path    string
	brokers Brokers
}

func (r *reader) cluster(v *value) {
	var raw any
	switch {
	case v.null():
		return
	case v.kind == yaml.SequenceNode:
		raw = r.strs(v)
	default:
		raw = r.str(v)
	}
	b, err := parseBrokers(raw)
	if err != nil {
		r.errorf(v.path, "%v", err)
		return
	}
	r.c.clusters = append(r.c.clusters, clusterRef{path: v.path, brokers: b})
}
