package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink is a Markdown link's target; an image's too.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the README and docs/ names a file that exists,
// and, with an anchor, a heading of that file, as GitHub makes anchors.
func TestDocsLinksAndAnchors(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(raw))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range proseLines(string(raw)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				where := fmt.Sprintf("%s:%d: %s", strings.TrimPrefix(page, "../"), i+1, target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: no such file", where)
					continue
				}
				checked++
				if anchor == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				a, err := anchorsOf(path)
				if err != nil {
					t.Fatal(err)
				}
				if !a[anchor] {
					t.Errorf("%s: no heading makes the anchor #%s", where, anchor)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d links; the docs have more", checked)
	}
}

// proseLines is doc's lines with those of fenced code blocks blanked, so
// line numbers stay right.
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors are the anchors GitHub gives doc's headings: lower case,
// punctuation dropped, spaces as hyphens, a repeat numbered.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(doc) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Every flag a metric's help names (scraped by Prometheus, read in
// dashboards) is one docs/settings.md lists: a renamed flag leaves none
// behind.
func TestMetricHelpNamesRealFlags(t *testing.T) {
	settings, err := os.ReadFile("../docs/settings.md")
	if err != nil {
		t.Fatal(err)
	}
	helps := regexp.MustCompile(`(?:NewDesc\(|Help: )"[^"]*"(?:, "[^"]*")?`)
	flag := regexp.MustCompile(`--[a-z][a-z0-9-]+`)
	named := 0
	for _, root := range []string{"../cluster", "../node", "../webhook"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, h := range helps.FindAllString(string(raw), -1) {
				for _, f := range flag.FindAllString(h, -1) {
					named++
					if !strings.Contains(string(settings), "| `"+f+"` |") {
						t.Errorf("%s: a metric's help names %s, which docs/settings.md does not list", strings.TrimPrefix(path, "../"), f)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if named == 0 {
		t.Fatal("no metric's help names a flag; the test reads nothing")
	}
}

// The docs' commands read what vgpud and the API give: vgpud's pods log
// JSON (VGPUD_LOG_FORMAT=json in the manifest), so a grep for key=value
// finds nothing; `kubectl get events` reads core/v1 Events, whose field
// is involvedObject, not events.k8s.io's regarding.
func TestDocsCommandsMatchWhatTheyRead(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	keyValue := regexp.MustCompile(`grep '[a-z]+=[a-z]+'`)
	for _, page := range append(pages, "../README.md") {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(page, "../"), i+1)
			if strings.Contains(line, "logs") && keyValue.MatchString(line) {
				t.Errorf("%s: %q greps key=value in vgpud's JSON logs; grep '\"key\":\"value\"'", where, line)
			}
			if strings.Contains(line, "kubectl get events") && strings.Contains(line, "regarding.") {
				t.Errorf("%s: %q: kubectl get events selects on involvedObject, not regarding", where, line)
			}
		}
	}
}

// maxDocBytes bounds a docs page: one a reader finishes. A longer one is
// split by topic.
const maxDocBytes = 16 << 10

// No page under docs/ is longer than maxDocBytes.
func TestDocsPagesAreShort(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs pages: %v", err)
	}
	for _, p := range pages {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > maxDocBytes {
			t.Errorf("%s is %d bytes, over %d: split it by topic into pages of their own", p, fi.Size(), maxDocBytes)
		}
	}
}
