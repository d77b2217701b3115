package cli

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// A markdown link's destination: inline ([text](dest), ![alt](dest)) or a
// reference definition ([label]: dest).
var (
	inlineLinkRE = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^\s)]*)`)
	refDefRE     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	atxRE        = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextRE     = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	schemeRE     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	lineAnchorRE = regexp.MustCompile(`^L\d+(-L\d+)?$`)
	mdLinkRE     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE    = regexp.MustCompile(`<[^>]+>`)
)

// mdLink is a relative link found in a markdown file.
type mdLink struct {
	line int
	dest string
}

// parseMarkdown returns a markdown file's relative links and the anchors
// of its headings. Fenced code blocks and code spans hold neither.
func parseMarkdown(text string) (links []mdLink, anchors map[string]bool) {
	anchors = make(map[string]bool)
	seen := make(map[string]int)
	addHeading := func(h string) {
		slug := headingSlug(h)
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			slug = fmt.Sprintf("%s-%d", slug, n+1)
		} else {
			seen[slug] = 0
		}
		anchors[slug] = true
	}
	lines := strings.Split(text, "\n")
	fence := ""
	prev := "" // the previous line, when it is paragraph text
	for i, l := range lines {
		if fence != "" {
			if strings.HasPrefix(strings.TrimSpace(l), fence) {
				fence = ""
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			fence, prev = m[1], ""
			continue
		}
		if m := atxRE.FindStringSubmatch(l); m != nil {
			addHeading(m[2])
			prev = ""
			continue
		}
		if setextRE.MatchString(l) && prev != "" {
			addHeading(prev)
			prev = ""
			continue
		}
		code := withoutCodeSpans(l)
		for _, m := range inlineLinkRE.FindAllStringSubmatch(code, -1) {
			links = append(links, mdLink{line: i + 1, dest: m[1]})
		}
		if m := refDefRE.FindStringSubmatch(code); m != nil {
			links = append(links, mdLink{line: i + 1, dest: m[1]})
		}
		prev = strings.TrimSpace(l)
	}
	return links, anchors
}

// withoutCodeSpans blanks the code spans of a line: `a](b)` is not a link.
func withoutCodeSpans(l string) string {
	b := []byte(l)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 1
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		run := strings.Repeat("`", n)
		end := -1
		for j := i + n; j < len(b); {
			k := strings.Index(string(b[j:]), run)
			if k < 0 {
				break
			}
			k += j
			if k+n < len(b) && b[k+n] == '`' { // a longer run: not the closer
				for k < len(b) && b[k] == '`' {
					k++
				}
				j = k
				continue
			}
			end = k + n
			break
		}
		if end < 0 {
			i += n
			continue
		}
		for j := i; j < end; j++ {
			b[j] = ' '
		}
		i = end
	}
	return string(b)
}

// headingSlug is the anchor GitHub gives a heading: its text as rendered
// (code spans keep their text, links their label), lower case, every
// character but letters, digits, marks, "-", "_" and spaces removed, each
// space a hyphen. Repeats get -1, -2, ... (parseMarkdown adds those).
func headingSlug(h string) string {
	h = mdLinkRE.ReplaceAllString(h, "$1")
	h = htmlTagRE.ReplaceAllString(h, "")
	h = strings.ReplaceAll(h, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// checkLinks reports every relative link of the markdown files (paths
// relative to root, slash-separated) whose file does not exist or whose
// anchor names no heading of the file it points to. It returns the
// problems and how many links and anchors it checked.
func checkLinks(root string, files []string) (problems []string, nLinks, nAnchors int) {
	type parsed struct {
		links   []mdLink
		anchors map[string]bool
	}
	cache := make(map[string]*parsed)
	parse := func(file string) (*parsed, error) {
		if p, ok := cache[file]; ok {
			return p, nil
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		links, anchors := parseMarkdown(string(data))
		p := &parsed{links, anchors}
		cache[file] = p
		return p, nil
	}
	for _, file := range files {
		p, err := parse(file)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, l := range p.links {
			dest := strings.Trim(l.dest, "<>")
			if dest == "" || schemeRE.MatchString(dest) {
				continue // an external link, or nothing to check
			}
			nLinks++
			where := fmt.Sprintf("%s:%d: %s", file, l.line, l.dest)
			target, anchor, _ := strings.Cut(dest, "#")
			if t, err := url.PathUnescape(target); err == nil {
				target = t
			}
			switch {
			case target == "":
				target = file
			case strings.HasPrefix(target, "/"): // GitHub: from the repository's root
				target = path.Clean(strings.TrimPrefix(target, "/"))
			default:
				target = path.Join(path.Dir(file), target)
			}
			if target == ".." || strings.HasPrefix(target, "../") {
				problems = append(problems, where+": points outside the repository")
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
				problems = append(problems, where+": no such file "+target)
				continue
			}
			if anchor == "" {
				continue
			}
			nAnchors++
			if !strings.HasSuffix(target, ".md") {
				if !lineAnchorRE.MatchString(anchor) {
					problems = append(problems, where+": "+target+" is not markdown; only line anchors (#L12) can point into it")
				}
				continue
			}
			tp, err := parse(target)
			if err != nil {
				problems = append(problems, where+": "+err.Error())
				continue
			}
			if !tp.anchors[anchor] {
				problems = append(problems, fmt.Sprintf("%s: %s has no heading with the anchor #%s", where, target, anchor))
			}
		}
	}
	return problems, nLinks, nAnchors
}

// docFiles lists README.md, docs/*.md and examples/**/*.md under root.
func docFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	err = filepath.WalkDir(filepath.Join(root, "examples"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

// TestDocLinksResolve checks that every relative link in the README,
// docs/ and examples/ names a file that exists and, with an #anchor, a
// heading of that file, by GitHub's rules for heading anchors.
func TestDocLinksResolve(t *testing.T) {
	files, err := docFiles("..")
	if err != nil {
		t.Fatal(err)
	}
	problems, nLinks, nAnchors := checkLinks("..", files)
	for _, p := range problems {
		t.Error(p)
	}
	// So that a change to the extraction cannot leave nothing checked.
	if nLinks < 20 || nAnchors < 10 {
		t.Errorf("checked only %d links and %d anchors in %v", nLinks, nAnchors, files)
	}
	t.Logf("checked %d links, %d with anchors, in %d files", nLinks, nAnchors, len(files))
}

// TestLinkCheckerFindsBrokenLinksAndAnchors runs the checker on a small
// tree with one link of every kind, good and broken.
func TestLinkCheckerFindsBrokenLinksAndAnchors(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.go", "package main\n")
	write("docs/b.md", strings.Join([]string{
		"# B",
		"## `state reset`: one step's state",
		"## Step kinds",
		"## Step kinds",
		"Setext, too",
		"----------",
		"```yaml",
		"# not a heading",
		"```",
	}, "\n"))
	write("README.md", strings.Join([]string{
		"# Title",                           // 1
		"[ok](docs/b.md) [ok](docs/b.md#b)", // 2
		"[bad](docs/b.md#state-reset-ones-step-state)", // 3: broken: one's
		"[ok](docs/b.md#state-reset-one-steps-state)",  // 4
		"[ok](docs/b.md#step-kinds-1) [ok](#title)",    // 5
		"[bad](docs/b.md#step-kinds-2)",                // 6: broken: only two
		"[bad](docs/b.md#not-a-heading)",               // 7: broken: in code
		"[ok](docs/b.md#setext-too) [bad](#nope)",      // 8: broken: #nope
		"[bad](docs/missing.md) ![bad](img.png)",       // 9: broken twice
		"[ok](main.go#L1) [bad](main.go#top)",          // 10: broken: #top
		"`[code](nowhere.md)` [ok](https://x.y/#z)",    // 11: neither checked
		"[ok][r] [bad](../outside.md)",                 // 12: broken: outside
		"[r]: docs/b.md#nothing",                       // 13: broken
		"```",                                          // 14
		"[fenced](nowhere.md)",                         // 15: not checked
		"```",                                          // 16
		"[text that",                                   // 17
		"wraps](docs/gone.md)",                         // 18: broken
	}, "\n"))
	problems, nLinks, nAnchors := checkLinks(root, []string{"README.md"})
	want := []string{
		"README.md:3: docs/b.md#state-reset-ones-step-state: docs/b.md has no heading with the anchor #state-reset-ones-step-state",
		"README.md:6: docs/b.md#step-kinds-2: docs/b.md has no heading with the anchor #step-kinds-2",
		"README.md:7: docs/b.md#not-a-heading: docs/b.md has no heading with the anchor #not-a-heading",
		"README.md:8: #nope: README.md has no heading with the anchor #nope",
		"README.md:9: docs/missing.md: no such file docs/missing.md",
		"README.md:9: img.png: no such file img.png",
		"README.md:10: main.go#top: main.go is not markdown; only line anchors (#L12) can point into it",
		"README.md:12: ../outside.md: points outside the repository",
		"README.md:13: docs/b.md#nothing: docs/b.md has no heading with the anchor #nothing",
		"README.md:18: docs/gone.md: no such file docs/gone.md",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if nLinks != 17 || nAnchors != 12 {
		t.Errorf("checked %d links and %d anchors, want 17 and 12", nLinks, nAnchors)
	}
}
