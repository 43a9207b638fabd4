package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// raiseScript raises the same exception at the same place on every attempt.
const raiseScript = `import os
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if int(os.environ["RANK"]) == 1:
        raise ValueError("the batch has 3 columns, want 4")

main()
`

// TestRepeatedExceptionFailsFast runs a job whose rank 1 raises the same
// exception at the same line every time, with 5 restarts allowed: the
// master's diagnosis fails it after the second attempt, and the failure
// report carries the traceback and the diagnosis.
func TestRepeatedExceptionFailsFast(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "raise.py")
	if err := os.WriteFile(script, []byte(raiseScript), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	p := c.start("agent", "run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "5", script)
	if code := p.wait(t, jobTimeout); code != 1 {
		t.Fatalf("the job exited %d, want 1 (failed):\n%s", code, p.out)
	}
	out := p.out.String()
	if n := strings.Count(out, "starting workers"); n != 2 {
		t.Errorf("the workers were started %d times, want 2 (the second failure fails fast):\n%s", n, out)
	}
	for _, want := range []string{"ValueError: the batch has 3 columns, want 4", "raise.py", "fail-fast", "user-error"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
}
