package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/runconfig/runconfigtest"
)

var (
	envOf = runconfigtest.Env
	parse = runconfigtest.Parse
)

// TestHostedToken: the token of a job without `rover master`.
func TestHostedToken(t *testing.T) {
	secret := map[string]string{runconfig.JobSecretEnv: "s3cret-s3cret-s3cret"}
	tmp := t.TempDir()
	token := func(env map[string]string, args ...string) (string, error) {
		t.Helper()
		tok, _, err := hostedToken(parse(t, env, append([]string{"--nnodes=2"}, args...)...), envOf(env), tmp)
		return tok, err
	}
	a, err := token(secret, "--rdzv-endpoint=10.0.0.1:1", "--rdzv-id=a")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := token(secret, "--rdzv-endpoint=10.0.0.2:7", "--rdzv-id=a")
	b, _ := token(secret, "--rdzv-endpoint=10.0.0.1:1", "--rdzv-id=b")
	want, _ := client.JobToken(secret[runconfig.JobSecretEnv], "a")
	if a != want || a2 != a || b == a || len(a) != 64 || strings.Contains(a, "s3cret") {
		t.Errorf("derived tokens: job a %q and %q (want %q on any endpoint), job b %q (want another)", a, a2, want, b)
	}
	if _, err := token(map[string]string{runconfig.JobSecretEnv: "short"}, "--rdzv-endpoint=h:1"); ExitCode(err) != ExitUsage ||
		!strings.Contains(err.Error(), "fewer than 16") {
		t.Errorf("a short secret: %v, want a usage error", err)
	}
	if _, err := token(nil, "--rdzv-endpoint=10.0.0.1:1"); ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "set ROVER_JOB_SECRET") {
		t.Errorf("no secret off loopback: %v, want a usage error naming ROVER_JOB_SECRET", err)
	}
	// On loopback without a secret: one private file, the same token for
	// every agent, made once even when they race.
	var wg sync.WaitGroup
	toks := make([]string, 8)
	for i := range toks {
		wg.Go(func() {
			tok, _, err := hostedToken(parse(t, nil, "--nnodes=2", "--rdzv-endpoint=127.0.0.1:5", "--rdzv-id=j"), envOf(nil), tmp)
			if err != nil {
				t.Error(err)
			}
			toks[i] = tok
		})
	}
	wg.Wait()
	for _, tok := range toks {
		if tok != toks[0] || len(tok) != 64 {
			t.Fatalf("agents on loopback got tokens %q, want one 64-character token", toks)
		}
	}
	if other, _ := token(nil, "--rdzv-endpoint=localhost:6", "--rdzv-id=j"); other == toks[0] {
		t.Errorf("another endpoint shares the token")
	}
	dir := filepath.Join(tmp, "rover-"+strconv.Itoa(os.Getuid()))
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "jobs", "j@127.0.0.1:5.token"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", path, fi, err, want)
		}
	}
	// A directory others can read is refused.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := token(nil, "--rdzv-endpoint=127.0.0.1:5", "--rdzv-id=j"); ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "mode 0700") {
		t.Errorf("an open token directory: %v, want a usage error", err)
	}
}
