package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

// example is a pipeline shown in the documentation.
type example struct {
	file    string
	line    int // of the opening fence, or 1 for a whole file
	body    string
	invalid bool // marked <!-- invalid example -->: it shows an error on purpose
}

var (
	fenceRE   = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z]*)")
	invalidRE = regexp.MustCompile(`^<!--\s*invalid example\b.*-->$`)
)

// markdownExamples returns the YAML blocks of a Markdown file that contain
// "sources:", that is, whole pipelines rather than fragments of one. Blocks
// without a language are included, in case one was left unmarked.
func markdownExamples(file, text string) []example {
	var out []example
	lines := strings.Split(text, "\n")
	prev := "" // the last non-blank line before the current one
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			if s := strings.TrimSpace(lines[i]); s != "" {
				prev = s
			}
			continue
		}
		start, fence, lang := i, m[1], strings.ToLower(m[2])
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), fence); i++ {
			body = append(body, lines[i])
		}
		text := strings.Join(body, "\n") + "\n"
		if (lang == "yaml" || lang == "yml" || lang == "") && strings.Contains(text, "sources:") {
			out = append(out, example{file: file, line: start + 1, body: text, invalid: invalidRE.MatchString(prev)})
		}
		prev = ""
	}
	return out
}

// TestDocExamplesAreValid checks every pipeline the README, docs/ and
// examples/ show as `pipeline validate` does: configuration and graph.
// A reader copies these first; one that fails teaches the wrong thing.
func TestDocExamplesAreValid(t *testing.T) {
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var examples []example
	perFile := make(map[string]int)
	for _, f := range append([]string{"../README.md"}, docs...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range markdownExamples(strings.TrimPrefix(f, "../"), string(data)) {
			examples = append(examples, ex)
			perFile[ex.file]++
		}
	}
	yamls, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range yamls {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, example{file: strings.TrimPrefix(f, "../"), line: 1, body: string(data)})
		perFile["examples"]++
	}
	// So that a change to the extraction cannot leave nothing checked.
	for _, f := range []string{"README.md", "docs/config.md", "docs/operators.md", "examples"} {
		if perFile[f] == 0 {
			t.Errorf("found no pipeline in %s", f)
		}
	}

	noEnv := func(string) (string, bool) { return "", false }
	for _, ex := range examples {
		e := &env{reg: ops.NewRegistry()}
		_, _, err := e.checkConfig(config.Parse([]byte(ex.body), ex.file, noEnv))
		switch {
		case err != nil && !ex.invalid:
			t.Errorf("%s:%d: the example is not a valid pipeline (lines count from the block's first line):\n%v\n%s", ex.file, ex.line, err, ex.body)
		case err == nil && ex.invalid:
			t.Errorf("%s:%d: the example is marked invalid but is valid; drop the marker", ex.file, ex.line)
		}
	}
	t.Logf("checked %d examples: %v", len(examples), perFile)
}

// TestMarkdownExamples checks the extraction on a document with every kind
// of block it must take or leave.
func TestMarkdownExamples(t *testing.T) {
	doc := strings.Join([]string{
		"# Title",     // 1
		"```yaml",     // 2: taken
		"name: a",     //
		"sources: {}", //
		"```",         //
		"```yaml",     // 6: a fragment, left
		"steps: []",   //
		"```",         //
		"<!-- invalid example: shows the error -->", //
		"",                         //
		"~~~",                      // 11: no language, taken, marked invalid
		"sources: x",               //
		"~~~",                      //
		"```sh",                    // 14: shell, left
		"echo sources: x",          //
		"```",                      //
		"<!-- invalid example -->", //
		"Some prose.",              // the marker is for the block right after it only
		"```yml",                   // 19: taken, not marked
		"sources: y",               //
		"```",                      //
	}, "\n")
	got := markdownExamples("x.md", doc)
	want := []example{
		{file: "x.md", line: 2, body: "name: a\nsources: {}\n"},
		{file: "x.md", line: 11, body: "sources: x\n", invalid: true},
		{file: "x.md", line: 19, body: "sources: y\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d examples %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("example %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
