// Package privdir makes the agent's private directories: one per agent
// process, mode 0700, named after the agent's pid, so that the directories
// a killed agent (which cannot clean up) left behind are found and removed
// by the next agent of the same user. It does not decide what goes in them.
package privdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Create creates base/<prefix><pid>-<random> (mode 0700) for this agent,
// after removing the directories of the same prefix that agents of this user
// left behind when they were killed (their pid no longer runs): a killed
// agent cannot clean its /dev/shm arenas and runtime files itself.
func Create(base, prefix string) (string, error) {
	RemoveStale(base, prefix)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", prefix, os.Getpid()))
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// RemoveStale removes the directories base/<prefix><pid>-* of this user
// whose pid no longer runs.
func RemoveStale(base, prefix string) {
	matches, _ := filepath.Glob(filepath.Join(base, prefix+"*"))
	for _, m := range matches {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(m), prefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		fi, err := os.Stat(m)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue // another user's: not ours to judge
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(m)
		}
	}
}

// SafeName makes s safe as one element of a path: separators and control
// characters become '_'.
func SafeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r < ' ' {
			return '_'
		}
		return r
	}, s)
}
