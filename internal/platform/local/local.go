// Package local is the platform that runs a job's nodes on this machine:
// each node is a node agent (`rover run`) started as a child process, in
// a process group of its own, with its output in log files of its own
// (<Dir>/<node id>/stdout.log and stderr.log) and, prefixed with the node
// id, on a console. It is
// what `rover submit` runs a job on when there is no cluster, and it keeps
// the contract of package platform, so the master's node manager drives it
// as it will drive Kubernetes pods.
//
// A node is held from Create until Delete: an agent that exits is reported
// Exited and stays held (its log file too) until the master deletes it,
// which reports Deleted. Delete stops a running agent with SIGTERM, then
// SIGKILL after the grace period; the agent stops its workers and removes
// its shared memory on SIGTERM.
//
// Nothing of a node outlives it or this process. Every agent gets SIGTERM
// when this process dies, however it dies (its parent-death signal), and
// stops as on Delete. Every process of a node carries a tag in its
// environment (ROVER_LOCAL_NODE, unique to this platform and node); once
// the agent has exited, whatever still carries its node's tag (a worker's
// own children, which an agent killed with SIGKILL cannot stop) is killed
// with SIGKILL, and Options.AfterExit runs, before the node is reported
// Exited. Create after Close, or with a cancelled context, starts nothing.
//
// Options.MaxNodes gives the platform a capacity (rover submit
// --max-nodes-here): at most that many agents run at once. A node created
// beyond it is reported Pending and waits, its process not started, until
// a running node exits or is deleted and frees a place; the oldest
// waiting node starts first. Delete of a waiting node reports it Deleted
// at once. Capabilities().MaxNodes shows the capacity to the master.
//
// The machine has no resources to reserve,
// no images and one host, so a NodeSpec asking for any of them is refused
// with platform.ErrUnsupported.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/proc"
)

// Options configure a local platform.
type Options struct {
	// Dir receives each node's log directory; it is created if missing.
	Dir string
	// Console, when set, also receives every node's output, each line
	// prefixed with "[<node id>] ".
	Console io.Writer
	// Env is the base environment of every agent (nil: this process's).
	Env []string
	// Grace is how long Delete waits after SIGTERM before SIGKILL
	// (default 30s).
	Grace time.Duration
	// Now is the clock of events (default time.Now).
	Now func() time.Time
	// AfterExit, when set, runs once a node's agent has exited and its
	// processes are gone, before the node is reported Exited: the place
	// to remove what a killed agent leaves behind (its shared memory).
	AfterExit func(nodeID string)
	// MaxNodes, when above 0, is the most nodes whose agents run at once;
	// the nodes created beyond it stay Pending until one ends. 0: no
	// limit. Negative is refused.
	MaxNodes int
}

// TagEnv is the environment variable that tags every process of a node.
const TagEnv = "ROVER_LOCAL_NODE"

// Local runs nodes as processes on this machine.
type Local struct {
	opts Options
	host string
	key  string // random, in every tag: two platforms' nodes never share one

	mu     sync.Mutex
	closed bool
	cond   *sync.Cond
	nodes  map[string]*node
	events []platform.Event // every event, in order: watchers read from it
	queue  []*node          // nodes waiting for a place (MaxNodes), oldest first
	active int              // nodes whose agent runs: they hold a place
}

var _ platform.Platform = (*Local)(nil)

type node struct {
	spec   platform.NodeSpec
	p      *proc.Process
	out    *proc.Output
	exited bool
	exit   platform.Event
	// waiting: created beyond MaxNodes; its agent is not started yet.
	waiting bool
}

// New returns a local platform.
func New(opts Options) (*Local, error) {
	if opts.Dir == "" {
		return nil, errors.New("local platform: Options.Dir (where node logs go) is empty")
	}
	if opts.MaxNodes < 0 {
		return nil, fmt.Errorf("local platform: Options.MaxNodes is %d; give the most nodes to run at once, or 0 for no limit", opts.MaxNodes)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("local platform: create the log directory: %w", err)
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	if opts.Grace <= 0 {
		opts.Grace = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	var key [8]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("local platform: a random key for its nodes' tags: %w", err)
	}
	l := &Local{opts: opts, host: host, key: hex.EncodeToString(key[:]), nodes: map[string]*node{}}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

// Capabilities: one host, no resources, no images; MaxNodes is
// Options.MaxNodes.
func (l *Local) Capabilities() platform.Capabilities {
	return platform.Capabilities{MaxNodes: l.opts.MaxNodes}
}

// ErrClosed is Create's error once Close has begun.
var ErrClosed = errors.New("the local platform is closed: it starts no more nodes")

// Create starts the node's agent. It starts nothing when ctx has ended or
// Close has begun, and says so.
func (l *Local) Create(ctx context.Context, spec platform.NodeSpec) error {
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("node %s not started: %w", spec.ID, err)
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	switch {
	case spec.Image != "":
		return fmt.Errorf("%w: the local platform runs processes on this machine and cannot run image %q", platform.ErrUnsupported, spec.Image)
	case !spec.Resources.IsZero():
		return fmt.Errorf("%w: the local platform cannot reserve resources %+v", platform.ErrUnsupported, spec.Resources)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("node %s not started: %w", spec.ID, ErrClosed)
	}
	if _, ok := l.nodes[spec.ID]; ok {
		return fmt.Errorf("%w: node %s", platform.ErrExists, spec.ID)
	}
	tee, redirect := proc.None, proc.Stdout|proc.Stderr
	if l.opts.Console != nil {
		tee, redirect = redirect, proc.None
	}
	out, err := proc.OpenOutput(proc.OutputSpec{
		Dir:        l.LogDir(spec.ID),
		Redirect:   redirect,
		Tee:        tee,
		Console:    l.opts.Console != nil,
		Prefix:     "[" + spec.ID + "]",
		ConsoleOut: l.opts.Console,
		ConsoleErr: l.opts.Console,
	})
	if err != nil {
		return fmt.Errorf("node %s: open its log: %w", spec.ID, err)
	}
	l.emitLocked(platform.Event{NodeID: spec.ID, Kind: platform.Pending, Host: l.host})
	n := &node{spec: spec, out: out}
	l.nodes[spec.ID] = n
	if l.opts.MaxNodes > 0 && l.active >= l.opts.MaxNodes {
		n.waiting = true // it starts when a place is free
		l.queue = append(l.queue, n)
		return nil
	}
	l.startLocked(n)
	return nil
}

// startLocked starts n's agent. An agent that cannot start is a node that
// failed at once (the manager relaunches or fails); it holds no place.
func (l *Local) startLocked(n *node) {
	spec := n.spec
	p, err := proc.Start(proc.Spec{Argv: spec.Argv, Env: l.env(spec), Stdout: n.out.Stdout(), Stderr: n.out.Stderr(),
		ParentDeathSignal: syscall.SIGTERM}) // the agent stops its workers if this process dies
	if err != nil {
		n.out.Close()
		n.exited = true
		n.exit = platform.Event{NodeID: spec.ID, Kind: platform.Exited, ExitCode: 127, Reason: err.Error(), Host: l.host}
		l.emitLocked(n.exit)
		return
	}
	n.p = p
	l.active++
	l.emitLocked(platform.Event{NodeID: spec.ID, Kind: platform.Running, Host: l.host})
	go l.reap(n)
}

// startWaitingLocked starts the oldest waiting nodes while places are
// free, unless Close has begun.
func (l *Local) startWaitingLocked() {
	for !l.closed && len(l.queue) > 0 && (l.opts.MaxNodes == 0 || l.active < l.opts.MaxNodes) {
		n := l.queue[0]
		l.queue = l.queue[1:]
		n.waiting = false
		l.startLocked(n)
	}
}

// env is the agent's environment: the base, the spec's, and the node's
// identity as DLRover gives it to a pod.
func (l *Local) env(spec platform.NodeSpec) []string {
	env := slices.Clone(l.opts.Env)
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+spec.Env[k])
	}
	// The agent reads ROVER_NODE_ID and PET_NODE_RANK as --node-id and
	// --node-rank: a relaunched node joins with its predecessor's rank.
	return append(env, "NODE_ID="+spec.ID, "NODE_RANK="+strconv.Itoa(spec.Rank), "WORKER_ID="+strconv.Itoa(spec.Rank), "NODE_TYPE="+spec.Group,
		"ELASTIC_JOB_NAME="+spec.Job, "ROVER_RELAUNCH_COUNT="+strconv.Itoa(spec.Relaunch),
		"ROVER_NODE_ID="+spec.ID, "PET_NODE_RANK="+strconv.Itoa(spec.Rank), l.tag(spec.ID))
}

// NodeCPUSeconds is the CPU time the processes of node id have used, read
// from /proc (every process carrying the node's tag); ok is false for a
// node that is not running here. The master samples it to see how busy
// the roles of a parameter-server job are, which run no agent to report
// their use.
func (l *Local) NodeCPUSeconds(id string) (float64, bool) {
	l.mu.Lock()
	n := l.nodes[id]
	running := n != nil && n.p != nil && !n.exited
	l.mu.Unlock()
	if !running {
		return 0, false
	}
	return proc.TaggedCPUSeconds(l.tag(id))
}

// tag is the environment entry every process of node id carries.
func (l *Local) tag(id string) string { return TagEnv + "=" + l.key + "/" + id }

// reap reports the agent's exit, once every process of the node is gone.
func (l *Local) reap(n *node) {
	<-n.p.Done()
	e := n.p.Exit()
	proc.KillTagged(l.tag(n.spec.ID))
	n.out.Close()
	if l.opts.AfterExit != nil {
		l.opts.AfterExit(n.spec.ID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n.exited = true
	n.exit = platform.Event{NodeID: n.spec.ID, Kind: platform.Exited, ExitCode: e.ShellCode(), Signal: int(e.Signal), Host: l.host}
	l.emitLocked(n.exit)
	l.active--
	l.startWaitingLocked()
}

// Delete stops the node's agent (SIGTERM, then SIGKILL after the grace
// period) and forgets it.
func (l *Local) Delete(ctx context.Context, id string) error {
	l.mu.Lock()
	n, ok := l.nodes[id]
	if ok && n.waiting {
		// Never started: it goes at once.
		l.queue = slices.DeleteFunc(l.queue, func(q *node) bool { return q == n })
		n.waiting, n.exited = false, true
		n.out.Close()
		delete(l.nodes, id)
		l.emitLocked(platform.Event{NodeID: id, Kind: platform.Deleted, Host: l.host})
		l.mu.Unlock()
		return nil
	}
	var p *proc.Process
	if ok {
		p = n.p
	}
	l.mu.Unlock()
	if !ok {
		return nil
	}
	if p != nil {
		p.Stop(l.opts.Grace)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.nodes[id]; !ok {
		return nil // a concurrent Delete finished first
	}
	for !n.exited {
		l.cond.Wait() // reap reports the exit before the node goes
	}
	delete(l.nodes, id)
	l.emitLocked(platform.Event{NodeID: id, Kind: platform.Deleted, Host: l.host})
	return nil
}

// Close deletes every node, as Delete does, concurrently; from its start
// on, Create starts nothing.
func (l *Local) Close() {
	l.mu.Lock()
	l.closed = true
	ids := make([]string, 0, len(l.nodes))
	for id := range l.nodes {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { _ = l.Delete(context.Background(), id) })
	}
	wg.Wait()
}

// Watch reports the state of every held node, then Synced, then every
// event, until ctx ends.
func (l *Local) Watch(ctx context.Context, fn func(platform.Event)) error {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop()
	l.mu.Lock()
	var first []platform.Event
	for _, id := range slices.Sorted(mapsKeys(l.nodes)) {
		n := l.nodes[id]
		if n.waiting {
			first = append(first, platform.Event{NodeID: id, Kind: platform.Pending, Host: l.host, Time: l.opts.Now()})
		} else if n.exited {
			first = append(first, n.exit)
		} else {
			first = append(first, platform.Event{NodeID: id, Kind: platform.Running, Host: l.host, Time: l.opts.Now()})
		}
	}
	next := len(l.events)
	l.mu.Unlock()
	for _, e := range first {
		fn(e)
	}
	fn(platform.Event{Kind: platform.Synced, Time: l.opts.Now()})
	for {
		l.mu.Lock()
		for next == len(l.events) && ctx.Err() == nil {
			l.cond.Wait()
		}
		if ctx.Err() != nil {
			l.mu.Unlock()
			return ctx.Err()
		}
		batch := slices.Clone(l.events[next:])
		next = len(l.events)
		l.mu.Unlock()
		for _, e := range batch {
			fn(e)
		}
	}
}

func (l *Local) emitLocked(e platform.Event) {
	e.Time = l.opts.Now()
	l.events = append(l.events, e)
	l.cond.Broadcast()
}

// LogDir is the directory of node id's stdout.log and stderr.log.
func (l *Local) LogDir(id string) string { return filepath.Join(l.opts.Dir, id) }

func mapsKeys(m map[string]*node) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
