package rover

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// TestDocumentedMakeTargetsExist keeps the README and docs/ true: every
// `make TARGET` they tell a user to run (in code spans and at the start of
// a line of a code block) is a target of the Makefile.
func TestDocumentedMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(mk), -1) {
		targets = append(targets, m[1])
	}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md")
	use := regexp.MustCompile("(?m)(?:`|^\\s*)(?:[A-Z_]+=\\S+ )*make ([a-z][a-z0-9-]*)")
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllStringSubmatch(string(b), -1) {
			checked++
			if !slices.Contains(targets, m[1]) {
				t.Errorf("%s tells users to run `make %s`, which the Makefile does not have (its targets: %v)", doc, m[1], targets)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no `make TARGET` in README.md and docs/: the pattern no longer matches how they write it")
	}
}
