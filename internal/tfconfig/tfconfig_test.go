package tfconfig

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// documented is the cluster of TensorFlow's documented example.
var documented = map[string][]string{
	Chief:     {"host0:2222"},
	Worker:    {"host1:2222", "host2:2222", "host3:2222"},
	PS:        {"host4:2222", "host5:2222"},
	Evaluator: {"host6:2222"},
}

// TestDocumentedTFConfig: TF_CONFIG of every role is, as JSON, what
// TensorFlow's documentation gives for the same cluster.
func TestDocumentedTFConfig(t *testing.T) {
	c, err := New(documented)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("testdata/documented.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, " ", 3)
		index, _ := strconv.Atoi(parts[1])
		got, err := c.TFConfig(parts[0], index)
		if err != nil {
			t.Fatalf("%s %d: %v", parts[0], index, err)
		}
		var gotV, wantV any
		if err := json.Unmarshal([]byte(got), &gotV); err != nil {
			t.Fatalf("%s %d: TF_CONFIG %q is not JSON: %v", parts[0], index, got, err)
		}
		if err := json.Unmarshal([]byte(parts[2]), &wantV); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(wantV, gotV); d != "" {
			t.Errorf("%s %d: TF_CONFIG differs from TensorFlow's documented one (-documented +got):\n%s", parts[0], index, d)
		}
		n++
	}
	if n != 5 {
		t.Fatalf("read %d documented lines, want 5", n)
	}
}

// TestResolverReadsIt reads TF_CONFIG as TensorFlow's TFConfigClusterResolver
// does: the task's own address is cluster[type][index] (but for the
// evaluator), and the number of PS is len(cluster["ps"]).
func TestResolverReadsIt(t *testing.T) {
	c, err := New(documented)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range Roles {
		for i := range c.Count(role) {
			s, err := c.TFConfig(role, i)
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Cluster map[string][]string
				Task    struct {
					Type  string
					Index int
				}
			}
			if err := json.Unmarshal([]byte(s), &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.Task.Type != role || cfg.Task.Index != i {
				t.Errorf("%s %d: task %+v", role, i, cfg.Task)
			}
			if len(cfg.Cluster[PS]) != 2 {
				t.Errorf("%s %d: %d PS in the cluster, want 2", role, i, len(cfg.Cluster[PS]))
			}
			if role == Evaluator {
				if _, ok := cfg.Cluster[Evaluator]; ok {
					t.Errorf("the evaluator is in the cluster: %s", s)
				}
				continue
			}
			if got := cfg.Cluster[role][i]; got != documented[role][i] {
				t.Errorf("%s %d: own address %s, want %s", role, i, got, documented[role][i])
			}
		}
	}
}

// TestEnvGolden: the whole environment of each role, against
// testdata/env.golden (go test -update rewrites it).
func TestEnvGolden(t *testing.T) {
	c, err := New(map[string][]string{
		PS:     {"127.0.0.1:20001", "127.0.0.1:20002"},
		Worker: {"127.0.0.1:20003", "127.0.0.1:20004", "127.0.0.1:20005"},
		Chief:  {"127.0.0.1:20006"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range []struct {
		role           string
		index, version int
	}{{PS, 0, 0}, {PS, 1, 2}, {Worker, 0, 0}, {Worker, 2, 1}, {Chief, 0, 0}} {
		env, err := c.Env("ps-job", r.role, r.index, r.version)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "# %s %d, cluster version %d\n", r.role, r.index, r.version)
		for _, k := range slices.Sorted(maps.Keys(env)) {
			fmt.Fprintf(&b, "%s=%s\n", k, env[k])
		}
	}
	path := filepath.Join("testdata", "env.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if d := cmp.Diff(string(want), b.String()); d != "" {
		t.Errorf("environment differs from %s (-want +got):\n%s", path, d)
	}
}

// TestNewRefuses: every bad cluster is refused, naming what is wrong.
func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name  string
		addrs map[string][]string
		want  []string
	}{
		{"no ps", map[string][]string{Worker: {"h:1"}}, []string{"no ps replicas"}},
		{"no trainer", map[string][]string{PS: {"h:1"}}, []string{"no worker or chief"}},
		{"two chiefs", map[string][]string{PS: {"h:1"}, Chief: {"h:2", "h:3"}}, []string{"2 chief replicas"}},
		{"unknown role", map[string][]string{PS: {"h:1"}, Worker: {"h:2"}, "master": {"h:3"}}, []string{`role "master" is unknown`}},
		{"bad address", map[string][]string{PS: {"h"}, Worker: {"h:2"}}, []string{`ps 0: address "h" is not host:port`}},
		{"same address", map[string][]string{PS: {"h:1"}, Worker: {"h:1"}}, []string{"ps 0 and worker 0 have the same address h:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.addrs)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v, want ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	c, _ := New(documented)
	if _, err := c.Env("j", Worker, 3, 0); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "worker 3 is not in the cluster") {
		t.Errorf("worker 3: %v", err)
	}
}
