package userfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadMax(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "token")
	if err := os.WriteFile(small, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), 1025), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := ReadMax(small, 1024)
	if err != nil || string(b) != "0123456789abcdef\n" {
		t.Fatalf("ReadMax(small) = %q, %v", b, err)
	}
	for _, tc := range []struct {
		name, path string
		size       int64
	}{
		{"regular file past the limit", big, 1025},
		{"/dev/zero, a device without end", "/dev/zero", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadMax(tc.path, 1024)
			var tl *TooLargeError
			if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) {
				t.Fatalf("ReadMax(%s) = %v, want a *TooLargeError", tc.path, err)
			}
			if tl.Size != tc.size || tl.Limit != 1024 || tl.Path != tc.path {
				t.Errorf("error = %+v, want size %d, limit 1024, path %s", tl, tc.size, tc.path)
			}
			if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), "1024 bytes") {
				t.Errorf("error %q does not name the file and the limit", err)
			}
		})
	}
	if _, err := ReadMax(dir, 1024); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("ReadMax(a directory) = %v, want an error saying it is a directory", err)
	}
	if _, err := ReadMax(filepath.Join(dir, "missing"), 1024); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadMax(missing) = %v, want ErrNotExist", err)
	}
}

// TestReadPipe: a FIFO (as `--token-file <(cmd)` gives) is read up to its
// end.
func TestReadPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("from a pipe\n")
			err = errors.Join(err, f.Close())
		}
		done <- err
	}()
	b, err := Read(fifo)
	if err != nil || string(b) != "from a pipe\n" {
		t.Fatalf("Read(fifo) = %q, %v", b, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
