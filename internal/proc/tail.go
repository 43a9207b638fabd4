package proc

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// tailWindow is how much of the end of a file Tail reads.
const tailWindow = 64 << 10

// Tail returns the last maxLines lines of the file at path, without a
// trailing newline, for failure reports. It reads at most the last 64 KiB;
// a line cut by that window is dropped unless it is the only one.
func Tail(path string, maxLines int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("tail %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("tail %s: %w", path, err)
	}
	if maxLines <= 0 {
		return "", nil
	}
	// Read one byte before the window too, to tell whether the window
	// starts at a line boundary.
	off := max(fi.Size()-tailWindow-1, 0)
	buf := make([]byte, fi.Size()-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("tail %s: %w", path, err)
	}
	return lastLines(buf[:n], off > 0, maxLines), nil
}

// lastLines returns the last max lines of b, without a trailing newline. If
// cut, b's first byte precedes the window: it is dropped, and so is the
// window's first line if that was cut and a later line exists.
func lastLines(b []byte, cut bool, max int) string {
	if cut && len(b) > 0 {
		boundary := b[0] == '\n'
		b = b[1:]
		if i := bytes.IndexByte(b, '\n'); !boundary && i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	b = bytes.TrimSuffix(b, []byte{'\n'})
	start := len(b)
	for range max {
		i := bytes.LastIndexByte(b[:start], '\n')
		if i < 0 {
			return string(b)
		}
		start = i
	}
	return string(b[start+1:])
}
