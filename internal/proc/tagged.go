package proc

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// killTaggedRounds bounds KillTagged's scans: each round kills what the
// last one found, and a process forked meanwhile carries the tag too, so a
// few rounds reach an empty scan unless something forks without end.
const killTaggedRounds = 20

// KillTagged sends SIGKILL to every process of this user whose environment
// holds the entry tag ("KEY=VALUE", matched whole), except this process,
// and scans again until a scan finds no process it had not signalled (or
// after a bounded number of rounds).
// It returns how many processes it signalled.
//
// A tag set in a child's environment is inherited by everything the child
// starts, however deep, in whatever process group or session, and
// whichever process adopts it once its parent dies: killing by tag reaches
// the grandchildren that a process-group kill and PR_SET_PDEATHSIG miss
// (a worker's `bash -c "python ...; echo"` whose bash was killed). Only a
// process that clears its environment (env -i) escapes. Linux only: it
// reads /proc/<pid>/environ, the environment a process was started with.
func KillTagged(tag string) int {
	want := []byte(tag)
	self := os.Getpid()
	signalled := map[int]bool{}
	for range killTaggedRounds {
		fresh := 0
		for _, pid := range TaggedPids(want) {
			// ESRCH: it ended meanwhile; EPERM: not ours. One found
			// again is still dying: signalled again, but not new.
			if pid != self && unix.Kill(pid, unix.SIGKILL) == nil && !signalled[pid] {
				signalled[pid] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	return len(signalled)
}

// TaggedPids lists the live processes (not zombies) whose environment
// holds the entry tag, among those this user may read.
func TaggedPids(tag []byte) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || len(env) == 0 { // another user's, gone, or a zombie
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(kv, tag) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
