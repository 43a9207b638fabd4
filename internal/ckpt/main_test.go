package ckpt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// helperEnv switches the test binary into a helper process (see TestMain).
const helperEnv = "ROVER_CKPT_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "crash-writer":
		crashWriterHelper(os.Args[len(os.Args)-2], os.Args[len(os.Args)-1])
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", helperEnv, os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// crashWriterHelper opens the arena dir/name, begins a save of step 99,
// fills the slot with garbage and dies by SIGKILL before committing: a
// training process killed in the middle of a save.
func crashWriterHelper(dir, name string) {
	a, err := OpenArena(dir, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	slot, _, err := a.BeginWrite(99)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	copy(slot, bytes.Repeat([]byte{0xde, 0xad}, len(slot)/2))
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// arenaDir returns a fresh private directory for arenas: under /dev/shm
// (tmpfs, as in production) where there is one, else the test's temp dir.
func arenaDir(t testing.TB) string {
	if fi, err := os.Stat(DefaultArenaDir); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp(DefaultArenaDir, "rover-ckpt-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// newArena creates an arena with slots of size bytes in a fresh directory.
func newArena(t testing.TB, size int64) *Arena {
	t.Helper()
	a, err := CreateArena(arenaDir(t), "arena", size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// openAgain opens a second, independent mapping of a's file, as another
// process would.
func openAgain(t testing.TB, a *Arena) *Arena {
	t.Helper()
	b, err := OpenArena(filepath.Dir(a.Path()), filepath.Base(a.Path()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// payload is the test content of step: n bytes derived from the step.
func payload(step int64, n int) []byte {
	b := []byte(strconv.FormatInt(step, 10) + ":")
	for len(b) < n {
		b = append(b, byte(step)+byte(len(b)))
	}
	return b[:n]
}

// save writes data as step through the whole writer protocol.
func save(t testing.TB, a *Arena, step int64, data []byte) {
	t.Helper()
	slot, tok, err := a.BeginWrite(step)
	if err != nil {
		t.Fatal(err)
	}
	copy(slot, data)
	if err := a.Commit(tok, int64(len(data))); err != nil {
		t.Fatal(err)
	}
}
