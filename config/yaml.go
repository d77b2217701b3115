package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parseDocument parses data as one YAML document whose top level is a
// mapping. It returns nil for an empty document. Its errors are plain:
// they stop everything, and name the file and (through yaml.v3) the line.
func parseDocument(data []byte, name string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(name, data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, fmt.Errorf("parsing %s: line %d: a second YAML document; the file must hold one", name, next.Line)
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(name, data, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("parsing %s: line %d: the top level must be a mapping of settings such as \"name: ...\", found %s",
			name, root.Line, describeNode(root))
	}
	return root, nil
}

var unknownAnchorRE = regexp.MustCompile(`unknown anchor '([^']*)' referenced`)

// syntaxError wraps a yaml.v3 error, making sure it names a line: yaml.v3
// leaves the line out for errors on the first one, and for unknown anchors.
func syntaxError(name string, data []byte, err error) error {
	if strings.HasPrefix(err.Error(), "yaml: line ") {
		return fmt.Errorf("parsing %s: %w", name, err)
	}
	line := 1
	if m := unknownAnchorRE.FindStringSubmatch(err.Error()); m != nil {
		if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
			line += bytes.Count(data[:i], []byte("\n"))
		}
	}
	return fmt.Errorf("parsing %s: line %d: %w", name, line, err)
}

// value is a node of the YAML document with aliases and merge keys (<<)
// resolved, that knows its dotted path.
type value struct {
	kind  yaml.Kind // ScalarNode, SequenceNode or MappingNode
	path  string
	line  int
	node  *yaml.Node // the scalar itself, for ScalarNode
	items []*value   // SequenceNode
	pairs []pair     // MappingNode, in file order
}

type pair struct {
	key string
	val *value
}

// get returns the value under key, or nil when v is not a mapping or has
// no such key.
func (v *value) get(key string) *value {
	if v == nil {
		return nil
	}
	for _, p := range v.pairs {
		if p.key == key {
			return p.val
		}
	}
	return nil
}

// at returns the value at a dotted path below v, or nil.
func (v *value) at(path string) *value {
	for _, k := range strings.Split(path, ".") {
		v = v.get(k)
	}
	return v
}

// null reports whether v is absent or an explicit null ("key:" with
// nothing after it, "~", "null"). Both mean "not set".
func (v *value) null() bool {
	return v == nil || v.kind == yaml.ScalarNode && v.node.ShortTag() == "!!null"
}

// describe names v's shape for messages: `"abc"`, "a list", "a mapping".
func (v *value) describe() string {
	if v.kind == yaml.ScalarNode {
		return describeNode(v.node)
	}
	return describeKind(v.kind)
}

func describeNode(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return describeKind(n.Kind)
}

func describeKind(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return "a scalar"
}

// maxNodes bounds the values of the document after aliases are
// expanded, so that a file of nested aliases ("billion laughs") cannot
// exhaust memory or time.
const maxNodes = 100_000

// tree builds values from yaml.Nodes, recording the line of every path and
// the problems that are the document's shape rather than its settings.
type tree struct {
	lines     map[string]int
	errs      []*FieldError
	expanding map[*yaml.Node]bool // alias targets being expanded, to stop cycles
	nodes     int
	aliases   int   // aliases expanded so far
	inAlias   int   // depth of the aliases being expanded
	aliasLine int   // the line of the outermost alias being expanded
	over      error // maxNodes was reached; nothing after it is read
}

func newTree() *tree {
	return &tree{lines: make(map[string]int), expanding: make(map[*yaml.Node]bool)}
}

func (t *tree) errorf(path string, line int, format string, args ...any) {
	t.errs = append(t.errs, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// nullValue stands for what could not be read.
func nullValue(path string, line int) *value {
	return &value{kind: yaml.ScalarNode, path: path, line: line, node: &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}}
}

// build returns the value of n at path; n nil is an empty mapping. Past
// maxNodes it stops reading and sets t.over.
func (t *tree) build(n *yaml.Node, path string) *value {
	if n == nil {
		return &value{kind: yaml.MappingNode, path: path}
	}
	if t.over != nil {
		return nullValue(path, n.Line)
	}
	if t.nodes++; t.nodes > maxNodes {
		if t.inAlias > 0 {
			// The line of the alias written in the file, not of the
			// anchored value it repeats.
			t.over = fmt.Errorf("line %d: the document is too large once its aliases are expanded: more than %d values (each use of an alias repeats all its anchor holds)", t.aliasLine, maxNodes)
		} else if t.aliases > 0 {
			t.over = fmt.Errorf("line %d: the document is too large once its aliases are expanded: more than %d values (each use of an alias repeats all its anchor holds)", n.Line, maxNodes)
		} else {
			t.over = fmt.Errorf("line %d: the document holds more than %d values; a pipeline file may hold at most %d", n.Line, maxNodes, maxNodes)
		}
		return nullValue(path, n.Line)
	}
	switch n.Kind {
	case yaml.AliasNode:
		target, ok := t.resolve(n, path)
		if !ok {
			return nullValue(path, n.Line)
		}
		defer delete(t.expanding, target)
		if t.inAlias == 0 {
			t.aliasLine = n.Line
		}
		t.aliases++
		t.inAlias++
		defer func() { t.inAlias-- }()
		return t.build(target, path)
	case yaml.SequenceNode:
		v := &value{kind: yaml.SequenceNode, path: path, line: n.Line}
		for i, item := range n.Content {
			if t.over != nil {
				break
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			t.lines[p] = item.Line
			v.items = append(v.items, t.build(item, p))
		}
		return v
	case yaml.MappingNode:
		v := &value{kind: yaml.MappingNode, path: path, line: n.Line}
		t.addPairs(v, n, make(map[string]int), true)
		return v
	default:
		return &value{kind: yaml.ScalarNode, path: path, line: n.Line, node: n}
	}
}

// resolve follows the alias n, marking its target as being expanded (the
// caller unmarks it). It fails on an alias that contains itself.
func (t *tree) resolve(n *yaml.Node, path string) (*yaml.Node, bool) {
	target := n.Alias
	if target == nil || t.expanding[target] {
		t.errorf(path, n.Line, "alias *%s refers to itself", n.Value)
		return nil, false
	}
	t.expanding[target] = true
	return target, true
}

// addPairs adds the keys of the mapping n to v. Keys already seen win:
// explicit keys over merged ones (<<), earlier merges over later ones, as
// YAML's merge key specifies. Only explicit keys may not repeat.
func (t *tree) addPairs(v *value, n *yaml.Node, seen map[string]int, explicit bool) {
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content) && t.over == nil; i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			t.errorf(v.path, k.Line, "keys must be plain strings, found %s", describeKind(k.Kind))
			continue
		}
		p := joinPath(v.path, k.Value)
		if first, dup := seen[k.Value]; dup {
			if explicit {
				t.errorf(p, k.Line, "duplicate key (first at line %d)", first)
			}
			continue
		}
		seen[k.Value] = k.Line
		t.lines[p] = k.Line
		v.pairs = append(v.pairs, pair{key: k.Value, val: t.build(val, p)})
	}
	for _, m := range merges {
		if t.over != nil {
			return
		}
		t.merge(v, m, seen)
	}
}

// merge adds the keys of a merge key's value: a mapping or a list of them.
func (t *tree) merge(v *value, m *yaml.Node, seen map[string]int) {
	if m.Kind == yaml.AliasNode {
		target, ok := t.resolve(m, v.path)
		if !ok {
			return
		}
		defer delete(t.expanding, target)
		m = target
	}
	switch m.Kind {
	case yaml.MappingNode:
		t.addPairs(v, m, seen, false)
	case yaml.SequenceNode:
		for _, item := range m.Content {
			t.merge(v, item, seen)
		}
	default:
		t.errorf(v.path, m.Line, "<< must merge a mapping or a list of mappings, found %s", describeNode(m))
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// parentPath returns the path of the mapping or list holding path, or "".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// plain converts v to plain Go values: string, int, float64, bool, nil
// (and the other scalars yaml.v3 decodes), []any and map[string]any.
func plain(v *value) (any, error) {
	switch v.kind {
	case yaml.SequenceNode:
		out := make([]any, 0, len(v.items))
		for _, item := range v.items {
			x, err := plain(item)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(v.pairs))
		for _, p := range v.pairs {
			x, err := plain(p.val)
			if err != nil {
				return nil, err
			}
			out[p.key] = x
		}
		return out, nil
	default:
		if v.node.ShortTag() == "!!timestamp" {
			return v.node.Value, nil // a date stays the string it was written as
		}
		var x any
		if err := v.node.Decode(&x); err != nil {
			return nil, &FieldError{Path: v.path, Line: v.line, Msg: err.Error()}
		}
		return x, nil
	}
}

// suggest returns the known key closest to key, or "" when none is close
// enough to be the likely intent.
func suggest(key string, known []string) string {
	lower := strings.ToLower(key)
	for _, k := range known {
		// A key with a unit or a part too many or too few:
		// "interval_ms" for "interval", "session" for "session_timeout".
		if short, long := min(len(k), len(lower)), max(len(k), len(lower)); short >= 4 && long > short &&
			(strings.HasPrefix(k, lower+"_") || strings.HasPrefix(lower, k+"_")) {
			return k
		}
	}
	best, bestDist := "", 0
	for _, k := range known {
		if d := editDistance(lower, k); best == "" || d < bestDist {
			best, bestDist = k, d
		}
	}
	limit := 1
	switch {
	case len(key) > 8:
		limit = 3
	case len(key) > 4:
		limit = 2
	}
	if best == "" || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// bytes each cost one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
