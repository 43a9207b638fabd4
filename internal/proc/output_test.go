package proc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOutputRouting(t *testing.T) {
	const (
		stdoutText = "out1\nout2\n"
		stderrText = "err1\nerr2" // no trailing newline: flushed by Close
		pOut       = "[default0]:out1\n[default0]:out2\n"
		pErr       = "[default0]:err1\n[default0]:err2\n"
	)
	type files struct{ Stdout, Stderr *string } // nil: file must not exist
	str := func(s string) *string { return &s }
	tests := []struct {
		name             string
		redirect, tee    Std
		console          bool
		wantFiles        files
		wantOut, wantErr string
	}{
		// Streams that go only to the console are not prefixed (torchrun's
		// workers write to the console themselves); teed streams are.
		{"console only", None, None, true, files{}, stdoutText, stderrText},
		{"filtered", None, None, false, files{}, "", ""},
		{"redirect all", All, None, true, files{str(stdoutText), str(stderrText)}, "", ""},
		{"redirect stdout", Stdout, None, true, files{Stdout: str(stdoutText)}, "", stderrText},
		{"tee stderr", None, Stderr, true, files{Stderr: str(stderrText)}, stdoutText, pErr},
		{"tee all", None, All, true, files{str(stdoutText), str(stderrText)}, pOut, pErr},
		{"redirect and tee stdout", Stdout, Stdout, true, files{Stdout: str(stdoutText)}, pOut, stderrText},
		{"redirect stdout tee stderr", Stdout, Stderr, true, files{str(stdoutText), str(stderrText)}, "", pErr},
		{"tee filtered", None, All, false, files{str(stdoutText), str(stderrText)}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "attempt_0", "0")
			var consoleOut, consoleErr bytes.Buffer
			out, err := OpenOutput(OutputSpec{
				Dir:        dir,
				Redirect:   tt.redirect,
				Tee:        tt.tee,
				Console:    tt.console,
				Prefix:     "[default0]:",
				ConsoleOut: NewSyncWriter(&consoleOut),
				ConsoleErr: NewSyncWriter(&consoleErr),
			})
			if err != nil {
				t.Fatal(err)
			}
			p, err := Start(Spec{
				Argv:   []string{"sh", "-c", `printf '` + stdoutText + `'; printf '` + stderrText + `' >&2`},
				Stdout: out.Stdout(),
				Stderr: out.Stderr(),
			})
			if err != nil {
				out.Close()
				t.Fatal(err)
			}
			if e := waitDone(t, p); !e.Success() {
				t.Errorf("worker: %v", e)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("log dir: %v, %v; want mode 0700", fi, err)
			}
			for name, want := range map[string]*string{"stdout.log": tt.wantFiles.Stdout, "stderr.log": tt.wantFiles.Stderr} {
				path := filepath.Join(dir, name)
				got, err := os.ReadFile(path)
				if want == nil {
					if !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s: err %v, want it not to exist", name, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if diff := cmp.Diff(*want, string(got)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", name, diff)
				}
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v, %v; want mode 0600", name, fi, err)
				}
			}
			if diff := cmp.Diff(tt.wantOut, consoleOut.String()); diff != "" {
				t.Errorf("console stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantErr, consoleErr.String()); diff != "" {
				t.Errorf("console stderr (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOutputWriters(t *testing.T) {
	dir := t.TempDir()
	console, err := os.Create(filepath.Join(dir, "console"))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	tests := []struct {
		name       string
		spec       OutputSpec
		stdoutFile bool // Stdout() is the log file itself
		stdoutNil  bool
		stderrNil  bool
	}{
		{"redirect gives the file to the child", OutputSpec{Dir: dir, Redirect: Stdout}, true, false, true},
		{"nothing routed discards", OutputSpec{}, false, true, true},
		{"nil console discards", OutputSpec{Console: true}, false, true, true},
		{"a console file goes to the child", OutputSpec{Console: true, ConsoleOut: NewSyncWriter(console)}, true, false, true},
		{"nil console discards teed streams", OutputSpec{Dir: dir, Tee: All, Console: true}, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := OpenOutput(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			_, isFile := out.Stdout().(*os.File)
			got := []bool{isFile, out.Stdout() == nil, out.Stderr() == nil}
			if diff := cmp.Diff([]bool{tt.stdoutFile, tt.stdoutNil, tt.stderrNil}, got); diff != "" {
				t.Errorf("[stdout is file, stdout nil, stderr nil] (-want +got):\n%s", diff)
			}
			for _, w := range []io.Writer{out.Stdout(), out.Stderr()} {
				if w == nil {
					continue
				}
				if _, err := w.Write([]byte("x\n")); err != nil {
					t.Errorf("Write: %v", err)
				}
			}
		})
	}
}

func TestOutputErrors(t *testing.T) {
	if _, err := OpenOutput(OutputSpec{Redirect: All}); err == nil {
		t.Error("redirect without Dir succeeded")
	}
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenOutput(OutputSpec{Dir: filepath.Join(blocker, "sub"), Tee: All}); err == nil {
		t.Error("Dir under a regular file succeeded")
	}

	// A failing console never fails the worker's writes; Close reports it.
	out, err := OpenOutput(OutputSpec{Dir: t.TempDir(), Tee: Stdout, Console: true, ConsoleOut: failWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := out.Stdout().Write([]byte("a\n")); n != 2 || err != nil {
		t.Errorf("Write = %d, %v; want 2, nil", n, err)
	}
	if err := out.Close(); err == nil {
		t.Error("Close did not report the console error")
	}
}
