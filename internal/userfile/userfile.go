// Package userfile reads the files whose paths a user names on a command
// line, in the environment or in a job spec: token files, TLS certificates,
// keys and CA bundles, job specs, error files. Every such read goes through
// Read, which bounds it: a path that names /dev/zero, a FIFO that never
// ends or a file written without end cannot make a Rover process read
// without limit. It does not read files Rover itself writes and owns (its
// state, its checkpoints) or the kernel's (/proc).
package userfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxSize is the most bytes Read reads from a file a user names: far more
// than any token, certificate chain, CA bundle or job spec holds.
const MaxSize = 16 << 20

// ErrTooLarge is wrapped by the error of a read past its limit.
var ErrTooLarge = errors.New("file too large")

// TooLargeError is the error of a file that holds more than a read's limit.
type TooLargeError struct {
	Path  string
	Limit int64
	// Size is the file's size when it is a regular file; -1 when the file
	// has no size (a device, a pipe) and yielded more than Limit bytes.
	Size int64
}

func (e *TooLargeError) Error() string {
	if e.Size >= 0 {
		return fmt.Sprintf("%s holds %d bytes, more than the %d bytes Rover reads from a file you name: name the right file", e.Path, e.Size, e.Limit)
	}
	return fmt.Sprintf("%s yields more than the %d bytes Rover reads from a file you name (it is not a regular file: a device or a pipe without end?): name a regular file", e.Path, e.Limit)
}

func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Read reads the file at path, up to MaxSize bytes.
func Read(path string) ([]byte, error) { return ReadMax(path, MaxSize) }

// ReadMax reads the file at path, refusing it, with a *TooLargeError, when
// it holds more than limit bytes. A regular file larger than limit is
// refused before it is read; a directory is refused as such; a device or a
// pipe (`--token-file <(pass show job)`) is read up to limit bytes and
// refused if it has more. Its other errors are os.Open's and the read's,
// which name the path.
func ReadMax(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, &os.PathError{Op: "read", Path: path, Err: errors.New("is a directory, not a file")}
	case fi.Mode().IsRegular() && fi.Size() > limit:
		return nil, &TooLargeError{Path: path, Limit: limit, Size: fi.Size()}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > limit {
		size := int64(-1)
		if fi.Mode().IsRegular() {
			size = int64(len(data)) // it grew while read
		}
		return nil, &TooLargeError{Path: path, Limit: limit, Size: size}
	}
	return data, nil
}
