package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/operator"
)

// The paths the image and the manifests agree on.
const (
	imageBinary  = "/usr/local/bin/rover"
	imageWorkdir = "/workspace"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line  int
	cmd   string   // upper case: FROM, RUN, COPY, ...
	flags []string // --from=build, --chown=...
	args  []string // the rest, split on blanks
	raw   string   // the rest, unsplit
}

// stage is a FROM and what follows it.
type stage struct {
	image, name string
	instrs      []instruction
}

// parseDockerfile reads the subset of the Dockerfile syntax the file uses:
// comments, backslash continuations, --flags, shell and exec forms (the
// latter split on blanks only).
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var cur strings.Builder
	start, n := 0, 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		cmd, rest, _ := strings.Cut(text, " ")
		in := instruction{line: start, cmd: strings.ToUpper(cmd), raw: strings.TrimSpace(rest)}
		for _, a := range strings.Fields(rest) {
			if len(in.args) == 0 && strings.HasPrefix(a, "--") {
				in.flags = append(in.flags, a)
				continue
			}
			in.args = append(in.args, a)
		}
		if in.cmd == "FROM" {
			s := stage{image: in.args[0]}
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "AS") {
				s.name = in.args[2]
			}
			stages = append(stages, s)
			return
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s:%d: %s before the first FROM", path, in.line, in.cmd)
			}
			return
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "#") || (t == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	return stages
}

func (s stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func (in instruction) flag(name string) string {
	for _, f := range in.flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// dockerignored says whether .dockerignore's patterns exclude path (slash
// separated, relative to the root) or a folder above it. It knows the
// subset the file uses: no "!" exceptions.
func dockerignored(t *testing.T, patterns []string, path string) bool {
	t.Helper()
	for _, p := range patterns {
		if strings.HasPrefix(p, "!") {
			t.Fatalf(".dockerignore: exception %q: teach dockerignored about it", p)
		}
		p = strings.TrimPrefix(p, "/")
		for prefix := path; ; prefix = filepath.ToSlash(filepath.Dir(prefix)) {
			if prefix == "." || prefix == "/" {
				break
			}
			ok, err := filepath.Match(p, prefix)
			if err != nil {
				t.Fatalf(".dockerignore: pattern %q: %v", p, err)
			}
			// "**/x" matches x at any depth, the root included.
			if rest, deep := strings.CutPrefix(p, "**/"); deep && !ok {
				base := filepath.Base(prefix)
				ok, _ = filepath.Match(rest, base)
			}
			if ok {
				return true
			}
		}
	}
	return false
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// TestDockerfile checks the image against the tree: what it copies exists and
// is sent to the build, it builds the rover command as the Makefile
// does, and it puts rover, the examples and the Python package where the
// manifests and the operator expect them.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("Dockerfile: %d stages, want 2 (the Go build, the image)", len(stages))
	}
	build, final := stages[0], stages[1]
	ignore := readLines(t, filepath.Join(root, ".dockerignore"))

	// The builder's Go is go.mod's.
	goVersion := ""
	for _, l := range readLines(t, filepath.Join(root, "go.mod")) {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goVersion = strings.Join(strings.SplitN(v, ".", 3)[:2], ".")
		}
	}
	if want := "golang:" + goVersion + "-"; !strings.HasPrefix(build.image, want) {
		t.Errorf("build stage FROM %s: want %s... (go.mod says go %s)", build.image, want, goVersion)
	}
	if build.name == "" {
		t.Fatal("build stage has no name (FROM ... AS build)")
	}

	// The go build line.
	var binOut string
	for _, in := range build.find("RUN") {
		if !strings.Contains(in.raw, "go build") {
			continue
		}
		for _, want := range []string{"CGO_ENABLED=1", "-tags nvml", "-trimpath", "-X main.version=", "./cmd/rover"} {
			if !strings.Contains(in.raw, want) {
				t.Errorf("Dockerfile:%d: go build without %s", in.line, want)
			}
		}
		if m := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(in.raw); m != nil {
			binOut = m[1]
		}
	}
	if binOut == "" {
		t.Fatal("build stage: no go build -o OUT line")
	}
	main, err := os.ReadFile(filepath.Join(root, "cmd", "rover", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^var version = `).Match(main) {
		t.Error("cmd/rover/main.go has no `var version = ...` for -X main.version to set")
	}

	// Every COPY from the context exists and is not ignored.
	for _, s := range stages {
		for _, in := range s.find("COPY") {
			if in.flag("from") != "" {
				continue
			}
			if len(in.args) < 2 {
				t.Errorf("Dockerfile:%d: COPY %s: want SRC... DEST", in.line, in.raw)
				continue
			}
			for _, src := range in.args[:len(in.args)-1] {
				if src == "." {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("Dockerfile:%d: COPY %s: %v", in.line, src, err)
				}
				if dockerignored(t, ignore, src) {
					t.Errorf("Dockerfile:%d: COPY %s: .dockerignore excludes it", in.line, src)
				}
			}
		}
	}
	// What go build needs is sent to the build.
	for _, p := range []string{"go.mod", "go.sum", "cmd/rover/main.go", "internal/operator/operator.go", "api/elastic/v1alpha1/doc.go", "python/embed.go", "python/rover/__init__.py"} {
		if dockerignored(t, ignore, p) {
			t.Errorf(".dockerignore excludes %s, which go build ./cmd/rover needs", p)
		}
	}

	// The image.
	copies := map[string]string{} // destination -> source
	for _, in := range final.find("COPY") {
		src := strings.Join(in.args[:len(in.args)-1], " ")
		if from := in.flag("from"); from != "" {
			if from != build.name {
				t.Errorf("Dockerfile:%d: COPY --from=%s: the build stage is %s", in.line, from, build.name)
			}
			src = from + ":" + src
		}
		copies[in.args[len(in.args)-1]] = src
	}
	checkCopy := func(dest, src string) {
		t.Helper()
		if got := copies[dest]; got != src {
			t.Errorf("image: %s comes from %q, want %q", dest, got, src)
		}
	}
	checkCopy(imageBinary, build.name+":"+binOut)
	checkCopy(imageWorkdir+"/examples", "examples")
	checkCopy("/opt/rover/python/rover", "python/rover")

	var runs, env []string
	for _, in := range final.find("RUN") {
		runs = append(runs, in.raw)
	}
	for _, in := range final.find("ENV") {
		env = append(env, in.args...)
	}
	if !slices.ContainsFunc(runs, func(r string) bool { return strings.Contains(r, "ln -s rover /usr/local/bin/dlrover-run") }) {
		t.Error("image: no dlrover-run symlink to rover (ln -s rover /usr/local/bin/dlrover-run)")
	}
	if !slices.ContainsFunc(runs, func(r string) bool { return strings.Contains(r, "python3-torch") }) {
		t.Error("image: does not install python3-torch")
	}
	if !slices.Contains(env, "PYTHONPATH=/opt/rover/python") {
		t.Errorf("image: ENV %v: want PYTHONPATH=/opt/rover/python", env)
	}
	if w := final.find("WORKDIR"); len(w) != 1 || w[0].raw != imageWorkdir {
		t.Errorf("image: WORKDIR %v, want %s", w, imageWorkdir)
	}
	u := final.find("USER")
	if len(u) != 1 {
		t.Fatalf("image: %d USER instructions, want 1", len(u))
	}
	uid, _, _ := strings.Cut(u[0].raw, ":")
	if uid == "0" || uid == "root" || !regexp.MustCompile(`^[0-9]+$`).MatchString(uid) {
		t.Errorf("image: USER %s: want a numeric non-root uid (kubelet checks runAsNonRoot on numbers)", u[0].raw)
	}
	if got := operatorDeployment(t).Spec.Template.Spec.SecurityContext.RunAsUser; got == nil || uid != itoa(*got) {
		t.Errorf("image: USER %s but the operator Deployment's runAsUser is not %s", uid, uid)
	}
	if !strings.HasPrefix(u[0].raw, uid+":") {
		t.Errorf("image: USER %s: give the group too", u[0].raw)
	}
}

// TestImageCommands checks that what the manifests and the operator run is
// in the image: rover on its PATH and the examples under its WORKDIR.
func TestImageCommands(t *testing.T) {
	root := repoRoot(t)
	if filepath.Dir(imageBinary) != "/usr/local/bin" {
		t.Fatalf("%s is not on the image's PATH", imageBinary)
	}
	rover := filepath.Base(imageBinary)
	op := operatorDeployment(t).Spec.Template.Spec.Containers[0]
	commands := map[string][]string{
		"the operator Deployment":                  op.Command,
		"the master pods (operator.MasterCommand)": operator.MasterCommand("ns", "job"),
	}
	for _, w := range sampleJob(t).Spec.ReplicaSpecs {
		commands["the sample's workers"] = w.Template.Spec.Containers[0].Command
	}
	for what, cmd := range commands {
		if len(cmd) == 0 || cmd[0] != rover {
			t.Errorf("%s run %q, want %s (the image's %s)", what, cmd, rover, imageBinary)
		}
		for _, a := range cmd[1:] {
			if !strings.HasSuffix(a, ".py") || strings.HasPrefix(a, "-") {
				continue
			}
			if filepath.IsAbs(a) || !strings.HasPrefix(a, "examples/") {
				t.Errorf("%s run %s: want a script under examples/ (the image's %s/examples)", what, a, imageWorkdir)
			} else if _, err := os.Stat(filepath.Join(root, a)); err != nil {
				t.Errorf("%s run %s: %v", what, a, err)
			}
		}
	}
}
