package robustness

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAptInstallIsQuiet runs scripts/apt-install (what find-python
// --install, make deps-test and .ci/run install with) against a fake
// apt-get that prints hundreds of lines: one line comes out, naming the
// log, which holds apt-get's output; when apt-get fails, the log's tail is
// shown too.
func TestAptInstallIsQuiet(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "apt-install"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		fail     bool
		wantCode int
	}{
		{"success", false, 0},
		{"failure", true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			fake := `#!/bin/sh
for i in $(seq 1 300); do echo "apt-get $* line $i"; done
echo "apt-get warning on stderr" >&2
if [ "$1" = install ] && [ -n "$FAKE_APT_FAIL" ]; then echo "E: Unable to locate package $3"; exit 100; fi
`
			for _, name := range []string{"apt-get", "sudo"} {
				body := fake
				if name == "sudo" {
					body = "#!/bin/sh\nexec \"$@\"\n"
				}
				if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(script, "python3-torch")
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
			if tt.fail {
				cmd.Env = append(cmd.Env, "FAKE_APT_FAIL=1")
			}
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			m := regexp.MustCompile(`^installing python3-torch with apt-get \(log: (\S+)\)$`).FindStringSubmatch(lines[0])
			if m == nil {
				t.Fatalf("first line %q, want \"installing python3-torch with apt-get (log: FILE)\"", lines[0])
			}
			log, err := os.ReadFile(m[1])
			if err != nil {
				t.Fatalf("the log it names: %v", err)
			}
			if !strings.Contains(string(log), "apt-get update line 300") || !strings.Contains(string(log), "apt-get warning on stderr") {
				t.Errorf("the log lacks apt-get's output:\n%s", log)
			}
			switch {
			case !tt.fail && len(lines) != 1:
				t.Errorf("printed %d lines, want 1:\n%s", len(lines), out)
			case tt.fail && (!strings.Contains(string(out), "Unable to locate package") || len(lines) > 45):
				t.Errorf("a failure shows %d lines, want the log's tail (at most 40) with apt-get's error:\n%s", len(lines), out)
			}
		})
	}
}
