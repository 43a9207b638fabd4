package ckptsaver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roverml/rover/internal/agent/privdir"
	"github.com/roverml/rover/internal/ckpt"
)

// The arena directory of an agent is base/rover-arenas-<job key>-<random>,
// mode 0700, with two files besides the arenas: "lock", which the agent
// holds an exclusive flock on for as long as it runs (the kernel releases
// it when the agent dies, however it dies), and "owner", which names the
// job key and node id. An agent restarted on the node after its
// predecessor was killed adopts the orphaned directory of its job and node
// id, so that the snapshots in memory survive the agent. An agent whose node
// id is generated (from its pid: it cannot match) adopts an orphan whose id
// was generated too; an explicit node id is never adopted by another node,
// whose agent may come back for it. The job key hashes the run id and the job's
// token: only the same job can adopt, and a new run of a job with the same
// name cannot.
//
// Orphans of other jobs are removed once they have been orphaned for
// orphanGrace (the lock file's mtime is refreshed while the agent saves), so
// that a killed agent's memory is not leaked for good.

const (
	arenaDirPrefix = "rover-arenas-"
	orphanGrace    = 10 * time.Minute
	lockName       = "lock"
	ownerName      = "owner"
)

// JobKey identifies a job run on a node without revealing its token. It
// starts with a letter, so that it never reads as the pid of the earlier
// layout.
func JobKey(runID, token string) string {
	h := sha256.Sum256([]byte(runID + "\x00" + token))
	return "j" + hex.EncodeToString(h[:8])
}

// Owner names the agent that owns an arena directory: the job and node.
type Owner struct {
	JobKey string `json:"job_key"`
	NodeID string `json:"node_id"`
	// Generated is true when the node id was made up from the agent's pid.
	Generated bool `json:"generated,omitempty"`
}

// adoptable reports whether an agent of node id (generated or not) may adopt
// an orphan of o's job.
func (o Owner) adoptable(nodeID string, generated bool) bool {
	return o.NodeID == nodeID || (o.Generated && generated)
}

// arenaDir is an agent's locked arena directory.
type arenaDir struct {
	path    string
	lock    *os.File
	adopted bool // the directory was a killed agent's
}

// openArenaDir adopts the orphaned arena directory of this job and node (or
// of this job) under base, or creates a new one; on the way it removes
// orphans of other jobs older than orphanGrace, and directories that agents
// of the earlier, pid-named layout left behind.
func openArenaDir(base, key string, self Owner, now time.Time) (*arenaDir, error) {
	self.JobKey = key
	nodeID := self.NodeID
	privdir.RemoveStale(base, arenaDirPrefix) // the pid-named layout of earlier versions
	matches, _ := filepath.Glob(filepath.Join(base, arenaDirPrefix+key+"-*"))
	var adopt *arenaDir
	for _, m := range matches {
		d, owner, ok := lockOrphan(m)
		if !ok {
			continue
		}
		if owner.JobKey != key || !owner.adoptable(nodeID, self.Generated) || (adopt != nil && owner.NodeID != nodeID) {
			d.release() // maybe another node of this job on this host, whose agent may come back
			continue
		}
		if adopt != nil {
			adopt.release()
		}
		adopt = d
		if owner.NodeID == nodeID {
			break
		}
	}
	removeOrphans(base, key, now)
	if adopt != nil {
		adopt.adopted = true
		if err := writeOwner(adopt.path, self); err != nil {
			adopt.release()
			return nil, err
		}
		return adopt, nil
	}
	return createArenaDir(base, key, self)
}

// lockOrphan locks dir when no live agent holds it and it is ours to judge.
func lockOrphan(dir string) (*arenaDir, Owner, bool) {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return nil, Owner{}, false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return nil, Owner{}, false // another user's
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, Owner{}, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, Owner{}, false // a live agent's
	}
	var owner Owner
	if b, err := os.ReadFile(filepath.Join(dir, ownerName)); err == nil {
		_ = json.Unmarshal(b, &owner)
	}
	return &arenaDir{path: dir, lock: f}, owner, true
}

// removeOrphans removes the unlocked arena directories of other jobs whose
// lock file was last refreshed more than orphanGrace before now.
func removeOrphans(base, key string, now time.Time) {
	matches, _ := filepath.Glob(filepath.Join(base, arenaDirPrefix+"*"))
	for _, m := range matches {
		if strings.HasPrefix(filepath.Base(m), arenaDirPrefix+key+"-") {
			continue
		}
		d, _, ok := lockOrphan(m)
		if !ok {
			continue
		}
		if fi, err := d.lock.Stat(); err == nil && now.Sub(fi.ModTime()) > orphanGrace {
			os.RemoveAll(d.path)
		}
		d.release()
	}
}

func createArenaDir(base, key string, self Owner) (*arenaDir, error) {
	path, err := os.MkdirTemp(base, arenaDirPrefix+key+"-")
	if err != nil {
		return nil, err
	}
	d, err := func() (*arenaDir, error) {
		if err := os.Chmod(path, 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(path, lockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		// Blocking: another agent (or rover submit's RemoveJobArenas) may
		// hold the new lock for a moment while it judges the directory;
		// seeing no owner yet, it lets go.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		d := &arenaDir{path: path, lock: f}
		if err := writeOwner(path, self); err != nil {
			d.release()
			return nil, err
		}
		return d, nil
	}()
	if err != nil {
		os.RemoveAll(path)
		return nil, err
	}
	return d, nil
}

func writeOwner(dir string, o Owner) error {
	b, _ := json.Marshal(o)
	tmp := filepath.Join(dir, ownerName+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, ownerName))
}

// refresh marks the directory as in use now (see orphanGrace).
func (d *arenaDir) refresh(now time.Time) {
	_ = os.Chtimes(d.lock.Name(), now, now)
}

// release unlocks the directory, leaving it in place.
func (d *arenaDir) release() {
	if d.lock != nil {
		d.lock.Close() // closing the descriptor drops the flock
		d.lock = nil
	}
}

// remove deletes the directory and unlocks it.
func (d *arenaDir) remove() {
	os.RemoveAll(d.path)
	d.release()
}

// arenaRanks lists the local ranks of the arena files in dir ("rank-N").
func arenaRanks(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "rank-"))
		if err == nil && strings.HasPrefix(e.Name(), "rank-") && n >= 0 {
			out = append(out, n)
		}
	}
	return out
}

// RemoveJobArenas removes the arena directories that agents of job runID
// (with token) left on this machine and no live agent holds: those of
// agents killed before they could clean up. `rover submit` calls it each
// time a node's agent exits (its relaunch has another node id and adopts
// nothing) and once the job's nodes are gone, so that a job leaves
// nothing in /dev/shm. It returns how many it removed.
func RemoveJobArenas(runID, token string) int {
	base := ckpt.DefaultArenaDir
	if _, err := os.Stat(base); err != nil {
		base = os.TempDir()
	}
	key := JobKey(runID, token)
	matches, _ := filepath.Glob(filepath.Join(base, arenaDirPrefix+key+"-*"))
	n := 0
	for _, m := range matches {
		d, owner, ok := lockOrphan(m)
		if !ok {
			continue
		}
		if owner.JobKey == key && os.RemoveAll(d.path) == nil {
			n++
		}
		d.release()
	}
	return n
}

// ArenaDirsOfNodes lists the arena directories on this machine whose owner
// is a node whose ID starts with prefix (a job's nodes: "JOB-"), whether or
// not an agent holds them: what tests check is gone when a job ended.
func ArenaDirsOfNodes(prefix string) []string {
	return arenaDirsOfNodes([]string{ckpt.DefaultArenaDir, os.TempDir()}, prefix)
}

func arenaDirsOfNodes(bases []string, prefix string) []string {
	var out []string
	for _, base := range bases {
		matches, _ := filepath.Glob(filepath.Join(base, arenaDirPrefix+"*"))
		for _, m := range matches {
			b, err := os.ReadFile(filepath.Join(m, ownerName))
			if err != nil {
				continue
			}
			var owner Owner
			if json.Unmarshal(b, &owner) == nil && strings.HasPrefix(owner.NodeID, prefix) {
				out = append(out, m)
			}
		}
	}
	return out
}
