package jobspec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// aliasBomb is a small document whose aliases of long strings expand to
// gigabytes, diluted with plain nodes as go-yaml's alias-ratio check
// allows.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("replicaSpecs:\n  worker:\n    template: {spec: {containers: [{name: main, command: [python, t.py]}]}}\n")
	b.WriteString("envs:\n  A0: &a0 \"" + strings.Repeat("x", 12000) + "\"\n")
	for i := 1; i < 8; i++ {
		fmt.Fprintf(&b, "  A%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), 10), ","))
	}
	for i := range 2000 {
		fmt.Fprintf(&b, "  P%d: p\n", i)
	}
	return b.String()
}

func TestDocumentBounds(t *testing.T) {
	bomb := aliasBomb()
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes; keep it small", len(bomb))
	}
	huge := make([]byte, 100<<20)
	copy(huge, "replicaSpecs: {worker: {template: {spec: {containers: [{command: [x]}]}}}}\n#")
	for i := 80; i < len(huge)-10; i++ {
		huge[i] = ' '
	}
	copy(huge[len(huge)-10:], "\nfoo: 1\n")
	tests := []struct {
		name string
		doc  []byte
		want string
	}{
		{"alias bomb", []byte(bomb), "MaxExpandedBytes"},
		{"100 MB with a typo at its end", huge, "MaxDocumentBytes"},
		{"many small aliases", []byte("a: &a x\nb: [" + strings.TrimSuffix(strings.Repeat("*a,", 2000), ",") + "]\n"), "MaxAliasExpansions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			mem := allocated(func() { _, err = Parse(tt.doc) })
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse: %v; want ErrTooLarge naming %s", err, tt.want)
			}
			if mem > 64<<20 {
				t.Errorf("Parse allocated %d MiB before refusing; want at most 64 MiB", mem>>20)
			}
			t.Logf("%d-byte document refused after allocating %.1f MiB: %v", len(tt.doc), float64(mem)/(1<<20), err)
		})
	}
}

func TestParseFileTooLarge(t *testing.T) {
	name := filepath.Join(t.TempDir(), "job.yaml")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	// 100 MB (sparse) with a typo at its end.
	if _, err := f.WriteAt([]byte("\nfoo: 1\n"), 100<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mem := allocated(func() { _, err = ParseFile(name) })
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "MaxDocumentBytes") {
		t.Fatalf("ParseFile: %v; want ErrTooLarge naming MaxDocumentBytes", err)
	}
	if mem > 16<<20 {
		t.Errorf("ParseFile allocated %d MiB before refusing; want at most 16 MiB", mem>>20)
	}
	t.Logf("100 MB file refused after allocating %.1f MiB", float64(mem)/(1<<20))
}

func TestDocumentStructure(t *testing.T) {
	const ctr = "{name: main, command: [python, t.py]}"
	tests := []struct {
		name, doc string
		want      []string // substrings of the error; none: it parses
	}{
		{"duplicate key", "replicaSpecs:\n  worker:\n    replicas: 2\n    replicas: 3\n    template: {spec: {containers: [" + ctr + "]}}\n",
			[]string{`line 4: the key "replicas" is given twice (also at line 3)`}},
		{"duplicate key in flow", "envs: {A: 1, A: 2}\n", []string{`the key "A" is given twice`}},
		{"two documents", "replicaSpecs: {}\n---\nfoo: 1\n", []string{"a second document starts at line 2"}},
		{"merge keys and anchors", "x: &ctr " + ctr + "\nreplicaSpecs:\n  worker:\n    template: {spec: {containers: [{<<: *ctr, image: i}]}}\n",
			[]string{"x: unknown field"}},
		{"anchors reused within bounds", "replicaSpecs:\n  worker:\n    template: {spec: {containers: [&c " + ctr + "]}}\nenvs: {A: &v \"1\", B: *v}\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Parse succeeded; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}
