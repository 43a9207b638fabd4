package agent

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/proc"
	"github.com/roverml/rover/internal/testbuf"
	"github.com/roverml/rover/python"
)

// standbyPython is the interpreter with torch the standby tests run.
const standbyPython = "/usr/bin/python3"

// standbyRig runs testdata/standby/dump.py cold and in a standby, with the
// same command line and environment.
type standbyRig struct {
	t      *testing.T
	pool   *standbyPool
	dir    string
	env    []string
	script string
}

func newStandbyRig(t *testing.T) *standbyRig {
	t.Helper()
	dir := t.TempDir()
	pypath, err := python.Extract(filepath.Join(dir, "python"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHON") {
			env = append(env, kv)
		}
	}
	env = append(env, "PYTHONPATH="+pypath, "RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1", "OMP_NUM_THREADS=1",
		"TORCHELASTIC_ERROR_FILE="+filepath.Join(dir, "error.json"), "ROVER_STACKS_FILE="+filepath.Join(dir, "stacks.txt"))
	pool := newStandbyPool(standbyScript(pypath), slog.New(slog.NewTextHandler(testLogWriter{t}, nil)))
	t.Cleanup(pool.close)
	// A relative script path, as users give it: sys.argv[0] keeps it,
	// __file__ and sys.path[0] are absolute.
	return &standbyRig{t: t, pool: pool, dir: dir, env: env, script: "testdata/standby/dump.py"}
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (r *standbyRig) launch(end string) workerLaunch {
	return workerLaunch{Argv: []string{standbyPython, "-u", r.script, filepath.Join(r.dir, "dump.json"), end}, Env: r.env}
}

// workerRun is what one run of dump.py left.
type workerRun struct {
	exit      proc.Exit
	dump      map[string]any
	stdout    string
	stderr    string
	errorFile map[string]any
}

func (r *standbyRig) finish(pr *proc.Process, stdout, stderr *testbuf.Buffer) workerRun {
	r.t.Helper()
	select {
	case <-pr.Done():
	case <-time.After(2 * time.Minute):
		pr.Stop(0)
		r.t.Fatal("the worker did not end")
	}
	run := workerRun{exit: pr.Exit(), stdout: stdout.String(), stderr: stderr.String()}
	run.dump = readJSON(r.t, filepath.Join(r.dir, "dump.json"))
	if _, err := os.Stat(filepath.Join(r.dir, "error.json")); err == nil {
		run.errorFile = readJSON(r.t, filepath.Join(r.dir, "error.json"))
	}
	for _, f := range []string{"dump.json", "error.json", "stacks.txt"} {
		os.Remove(filepath.Join(r.dir, f))
	}
	return run
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func (r *standbyRig) cold(end string) workerRun {
	r.t.Helper()
	l := r.launch(end)
	stdout, stderr := &testbuf.Buffer{}, &testbuf.Buffer{}
	pr, err := proc.Start(proc.Spec{Argv: l.Argv, Env: l.Env, Stdout: stdout, Stderr: stderr})
	if err != nil {
		r.t.Fatal(err)
	}
	return r.finish(pr, stdout, stderr)
}

// standby starts a standby, waits until it is ready and runs end in it.
func (r *standbyRig) standby(end string) workerRun {
	r.t.Helper()
	l := r.launch(end)
	r.pool.refill(0, l)
	r.waitReady(0)
	stdout, stderr := &testbuf.Buffer{}, &testbuf.Buffer{}
	pr, why := r.pool.take(0, l, stdout, stderr)
	if pr == nil {
		r.t.Fatalf("the standby was not used: %s", why)
	}
	return r.finish(pr, stdout, stderr)
}

func (r *standbyRig) waitReady(local int) *standby {
	r.t.Helper()
	r.pool.mu.Lock()
	s := r.pool.slots[local]
	r.pool.mu.Unlock()
	if s == nil {
		r.t.Fatal("no standby was started")
	}
	select {
	case <-s.ready:
	case <-s.proc.Done():
		r.t.Fatalf("the standby exited before it was ready: %s", s.errLog)
	case <-time.After(2 * time.Minute):
		r.t.Fatal("the standby did not get ready")
	}
	return s
}

// TestStandbyWorkerSeesACold start: everything dump.py reads of its start
// (environment, argv, sys.path, __main__, modules, signals, streams, open
// descriptors, priority) is the same in a standby as in a cold start.
func TestStandbyWorkerSeesAColdStart(t *testing.T) {
	r := newStandbyRig(t)
	cold := r.cold("ok")
	warm := r.standby("ok")
	if cold.exit.Code != 0 || warm.exit.Code != 0 {
		t.Fatalf("exits: cold %+v, standby %+v\ncold stderr: %s\nstandby stderr: %s", cold.exit, warm.exit, cold.stderr, warm.stderr)
	}
	if diff := cmp.Diff(cold.dump, warm.dump); diff != "" {
		t.Errorf("the standby worker's view differs from a cold one's (-cold +standby):\n%s", diff)
	}
	if cold.stdout != "dumped\n" || warm.stdout != cold.stdout {
		t.Errorf("stdout: cold %q, standby %q", cold.stdout, warm.stdout)
	}
	if warm.stderr != cold.stderr {
		t.Errorf("stderr: cold %q, standby %q", cold.stderr, warm.stderr)
	}
}

var pidText = regexp.MustCompile(`pid=\d+|"timestamp": "\d+"|\d{10}`)

// TestStandbyWorkerEndsLikeACold one: exit codes, death by signal, the
// traceback of an uncaught exception and torch's error file.
func TestStandbyWorkerEndsLikeAColdOne(t *testing.T) {
	r := newStandbyRig(t)
	ends := map[string]int{"exit:3": 3, "raise": 1, "interrupt": 128 + int(syscall.SIGINT), "record": 1, "kill": 128 + int(syscall.SIGKILL)}
	for end, code := range ends {
		t.Run(end, func(t *testing.T) {
			r.t = t
			cold, warm := r.cold(end), r.standby(end)
			if cold.exit.ShellCode() != code || warm.exit.ShellCode() != code {
				t.Errorf("exit: cold %v, standby %v, want status %d", cold.exit, warm.exit, code)
			}
			if c, w := pidText.ReplaceAllString(cold.stderr, "N"), pidText.ReplaceAllString(warm.stderr, "N"); c != w {
				t.Errorf("stderr differs:\ncold:\n%s\nstandby:\n%s", c, w)
			}
			ce, _ := json.Marshal(cold.errorFile)
			we, _ := json.Marshal(warm.errorFile)
			if c, w := pidText.ReplaceAllString(string(ce), "N"), pidText.ReplaceAllString(string(we), "N"); c != w {
				t.Errorf("error file differs:\ncold: %s\nstandby: %s", c, w)
			}
			if end == "record" && cold.errorFile == nil {
				t.Error("@record wrote no error file")
			}
		})
	}
}
