package goodput

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPure keeps the machine pure: its code imports only these standard
// packages (no I/O, no goroutine support, no master, agent or wire types)
// and never reads the clock.
func TestPure(t *testing.T) {
	allowed := map[string]bool{
		"bytes": true, "cmp": true, "encoding/json": true, "errors": true, "fmt": true,
		"maps": true, "math": true, "slices": true, "sort": true, "time": true,
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); !allowed[p] {
				t.Errorf("%s imports %s; the goodput machine must stay pure", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") {
					t.Errorf("%s: time.%s reads the clock; events carry their time", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
