package autoscale

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPure keeps the policy pure: its code imports only these standard
// packages (no I/O, no goroutine support, no master, platform or wire
// types) and never reads the clock.
func TestPure(t *testing.T) {
	allowed := map[string]bool{
		"bytes": true, "encoding/json": true, "errors": true, "fmt": true,
		"math": true, "slices": true, "strconv": true, "strings": true, "time": true, // parsing is pure too
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		files++
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); !allowed[p] {
				t.Errorf("%s imports %s; the autoscale policy must stay pure", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until" || sel.Sel.Name == "Sleep" || sel.Sel.Name == "After" || sel.Sel.Name == "NewTimer" || sel.Sel.Name == "NewTicker") {
					t.Errorf("%s: time.%s reads the clock or waits; events carry their time", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: a goroutine; the policy is driven by its caller", fset.Position(g.Pos()))
			}
			return true
		})
	}
	if files < 5 {
		t.Fatalf("only %d source files read; is the test in the package directory?", files)
	}
}
