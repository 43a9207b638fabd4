// Package deptest checks, from tests, what the module's packages import and
// do: that a package links none of a set of forbidden packages, that it
// reads no clock and starts no goroutine. The rules themselves, which
// packages are pure and which layer may import which, are declared once, in
// this package's layers_test.go.
//
// It asks the go command (go list -json) for the packages and parses their
// non-test Go files with go/parser; it does not type-check, so a call is
// recognised by the name the file gives the imported package.
//
//	pkgs := deptest.Load(t)
//	p := pkgs["github.com/roverml/rover/internal/shard"]
//	for _, use := range deptest.ClockCalls(t, p) {
//		t.Errorf("%s reads the clock", use)
//	}
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/roverml/rover/internal/testsrc"
)

// Module is the import path of Rover's module.
const Module = "github.com/roverml/rover"

// Package is what go list says of one package of the module.
type Package struct {
	ImportPath string
	Name       string
	Dir        string
	// Doc is the package comment's first sentence; "" for none.
	Doc string
	// GoFiles are the non-test Go files of the build (names in Dir).
	GoFiles []string
	// Imports are the package's direct imports; Deps its transitive ones.
	Imports []string
	Deps    []string
	// TestGoFiles and XTestGoFiles are its test files, in-package and
	// external.
	TestGoFiles  []string
	XTestGoFiles []string
}

var (
	loadOnce sync.Once
	loaded   map[string]Package
	loadErr  error
)

// Load lists every package of the module (go list -json ./... at the module
// root), keyed by import path, once per test process. It fails the test,
// never skips it, when the go command is missing or fails.
func Load(t testing.TB) map[string]Package {
	t.Helper()
	testsrc.Track() // the result depends on every package's sources
	loadOnce.Do(func() { loaded, loadErr = load() })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

func load() (map[string]Package, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("no go command on PATH to list the packages with: %w", err)
	}
	cmd := exec.Command(gobin, "list", "-json", Module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s/...: %w: %s", Module, err, stderr.Bytes())
	}
	pkgs := map[string]Package{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list's output: %w", err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) == 0 {
		return nil, errors.New("go list listed no packages")
	}
	return pkgs, nil
}

// Sorted returns the import paths of pkgs in order.
func Sorted(pkgs map[string]Package) []string {
	paths := make([]string, 0, len(pkgs))
	for path := range pkgs {
		paths = append(paths, path)
	}
	slices.Sort(paths)
	return paths
}

// Matches reports whether path is pattern or, when pattern ends in "/...",
// pattern's root or a package below it.
func Matches(pattern, path string) bool {
	if root, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == root || strings.HasPrefix(path, root+"/")
	}
	return path == pattern
}

// BadDeps returns the transitive dependencies of p that match one of the
// patterns (see Matches), each with the pattern's reason, in order.
func BadDeps(p Package, forbidden map[string]string) []string {
	var bad []string
	for _, dep := range p.Deps {
		for pattern, why := range forbidden {
			if Matches(pattern, dep) {
				bad = append(bad, fmt.Sprintf("%s links %s (%s)", p.ImportPath, dep, why))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// ClockFuncs are the functions of package time that read the wall clock or
// wait on it. A pure package may use package time for durations only.
var ClockFuncs = []string{
	"Now", "Since", "Until", "After", "AfterFunc", "Sleep", "Tick", "NewTicker", "NewTimer",
}

// ClockCalls returns the places in p's non-test files that use one of
// ClockFuncs, as "file:line: time.Now".
func ClockCalls(t testing.TB, p Package) []string {
	t.Helper()
	var uses []string
	for _, f := range parseFiles(t, p) {
		names := importNames(f.file, "time")
		for _, imp := range f.file.Imports {
			if imp.Path.Value == `"time"` && imp.Name != nil && imp.Name.Name == "." {
				uses = append(uses, fmt.Sprintf("%s: dot import of time", f.fset.Position(imp.Pos())))
			}
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && names[x.Name] && slices.Contains(ClockFuncs, sel.Sel.Name) {
				uses = append(uses, fmt.Sprintf("%s: time.%s", f.fset.Position(sel.Pos()), sel.Sel.Name))
			}
			return true
		})
	}
	return uses
}

// GoStatements returns the places in p's non-test files that start a
// goroutine.
func GoStatements(t testing.TB, p Package) []string {
	t.Helper()
	var places []string
	for _, f := range parseFiles(t, p) {
		ast.Inspect(f.file, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				places = append(places, fmt.Sprintf("%s: go statement", f.fset.Position(g.Pos())))
			}
			return true
		})
	}
	return places
}

// HasPackageComment reports whether one of p's files, test files included,
// carries a package comment.
func HasPackageComment(t testing.TB, p Package) bool {
	t.Helper()
	if p.Doc != "" {
		return true
	}
	files := slices.Concat(p.GoFiles, p.TestGoFiles, p.XTestGoFiles)
	for _, name := range files {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			return true
		}
	}
	return false
}

type parsedFile struct {
	fset *token.FileSet
	file *ast.File
}

func parseFiles(t testing.TB, p Package) []parsedFile {
	t.Helper()
	var files []parsedFile
	for _, name := range p.GoFiles {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		files = append(files, parsedFile{fset, f})
	}
	return files
}

// importNames returns the names by which f refers to the package with the
// import path path: its own name or the import's local name (none for a
// blank or dot import).
func importNames(f *ast.File, path string) map[string]bool {
	names := map[string]bool{}
	for _, imp := range f.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err != nil || p != path {
			continue
		}
		switch {
		case imp.Name == nil:
			names[filepath.Base(path)] = true
		case imp.Name.Name != "_" && imp.Name.Name != ".":
			names[imp.Name.Name] = true
		}
	}
	return names
}
