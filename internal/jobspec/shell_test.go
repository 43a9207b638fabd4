package jobspec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFindLauncher(t *testing.T) {
	vars := func(name string) (string, bool) {
		switch name {
		case "NODE_NUM":
			return "4", true
		case "NPROC":
			return "2", true
		}
		return "", false
	}
	tests := []struct {
		name  string
		argv  []string
		want  []string // the launcher's arguments; nil: no launcher
		shell bool     // run through the shell
		dir   string
		bad   string // a substring of the error
	}{
		{name: "direct", argv: []string{"dlrover-run", "--nnodes=2", "t.py"}, want: []string{"--nnodes=2", "t.py"}},
		{name: "plain line runs directly", argv: []string{"/bin/bash", "-c", `torchrun --nnodes 2 'my t.py' --msg "a b"`},
			want: []string{"--nnodes", "2", "my t.py", "--msg", "a b"}},
		{name: "NODE_NUM", argv: []string{"/bin/bash", "-c", "dlrover-run --nnodes=$NODE_NUM --nproc_per_node=${NPROC} train.py"},
			want: []string{"--nnodes=4", "--nproc_per_node=2", "train.py"}, shell: true},
		{name: "cd and &&", argv: []string{"sh", "-c", "cd /src/job && pip install -r req.txt && dlrover-run --nnodes=$NODE_NUM train.py --lr 0.1"},
			want: []string{"--nnodes=4", "train.py", "--lr", "0.1"}, shell: true, dir: "/src/job"},
		{name: "subshell, assignment, redirect", argv: []string{"bash", "-c", "(cd examples; EPOCHS=3 exec python -m torch.distributed.run --nnodes=1:$NODE_NUM t.py --epochs $EPOCHS 2>&1 | tee log)"},
			want: []string{"--nnodes=1:4", "t.py", "--epochs", "3"}, shell: true, dir: "examples"},
		{name: "env prefix", argv: []string{"sh", "-c", "env OMP_NUM_THREADS=2 dlrover-run --nnodes=$NODE_NUM t.py"}, want: []string{"--nnodes=4", "t.py"}, shell: true},
		{name: "default value", argv: []string{"bash", "-lc", "dlrover-run --nnodes=${NNODES:-2} t.py"}, want: []string{"--nnodes=2", "t.py"}, shell: true},
		{name: "no launcher", argv: []string{"bash", "-c", "python t.py && echo done"}},
		{name: "unterminated quote", argv: []string{"bash", "-c", "dlrover-run 't.py"}, bad: "cannot be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := findLauncher(tt.argv, vars)
			if tt.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("err %v; want one containing %q", err, tt.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if l != nil {
					t.Fatalf("found %q; want no launcher", l.args)
				}
				return
			}
			if l == nil {
				t.Fatal("no launcher found")
			}
			if diff := cmp.Diff(tt.want, l.args, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if (l.shell != nil) != tt.shell {
				t.Fatalf("through the shell: %v, want %v", l.shell != nil, tt.shell)
			}
			if l.shell != nil && l.shell.Dir != tt.dir {
				t.Errorf("dir %q, want %q", l.shell.Dir, tt.dir)
			}
		})
	}
}

func TestShellLineCommand(t *testing.T) {
	line := "cd /src && FOO=1 dlrover-run --nnodes=$NODE_NUM t.py"
	l, err := findLauncher([]string{"/bin/bash", "-c", line, "arg0"}, func(string) (string, bool) { return "", false })
	if err != nil || l == nil || l.shell == nil {
		t.Fatalf("findLauncher: %v, %v", l, err)
	}
	got := l.shell.Command(ShellQuote("/opt/my rover/rover") + " run")
	want := []string{"/bin/bash", "-c", "cd /src && FOO=1 '/opt/my rover/rover' run --nnodes=$NODE_NUM t.py", "arg0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Command (-want +got):\n%s", diff)
	}
}
