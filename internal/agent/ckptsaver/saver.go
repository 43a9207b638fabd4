// Package ckptsaver is the agent's side of flash checkpoint
// (docs/design/flash-checkpoint.md): it keeps the shared-memory arenas the
// node's workers save their snapshots into (one per local rank, in a
// private directory of /dev/shm that outlives the workers' restarts and is
// adopted by the next agent of the job when the agent is killed), serves
// the checkpoint calls of the workers' local API, writes committed
// snapshots to the job's storage in the background and reports each durable
// file to the master, and persists what memory holds when the workers stop.
// It does not decide which step the job commits or restores: the master
// does.
//
// It reaches the master through the two calls of Master, each retried with
// the agent's policy (Config.Retry), and learns of the running workers'
// round and the master's agreed step through Config's functions; it knows
// nothing else of the agent.
//
//	s, err := ckptsaver.Open(ckptsaver.Config{JobKey: ckptsaver.JobKey(run, token), ...})
//	defer s.Close()
//	go s.Run(ctx)              // persist in the background
//	...
//	s.PersistOnFailure(ctx)    // the workers stopped: make memory durable
package ckptsaver

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
)

// Master is the part of the master's API the saver calls:
// roverv1connect.MasterServiceClient has it.
type Master interface {
	CheckpointDurable(context.Context, *connect.Request[roverv1.CheckpointDurableRequest]) (*connect.Response[roverv1.CheckpointDurableResponse], error)
	DeclareCheckpoint(context.Context, *connect.Request[roverv1.DeclareCheckpointRequest]) (*connect.Response[roverv1.DeclareCheckpointResponse], error)
}

// Retry calls f until it succeeds, fails for good, or the master has been
// unreachable for as long as the agent waits for it: the agent's policy.
type Retry func(ctx context.Context, f func(context.Context) error) error

// Config is what a Saver needs of its agent.
type Config struct {
	// JobKey and Owner name the arena directory to adopt or create.
	JobKey       string
	Owner        Owner
	NprocPerNode int
	NodeID       string
	// MasterAddr names the master in error messages.
	MasterAddr string
	// Round is the world round of the workers running now: the round in
	// which they saved a step.
	Round func() int
	// AgreedStep is the step in memory the master's newest view says the
	// workers restore from; nil: none.
	AgreedStep func() *int64
	Master     Master
	Retry      Retry
	Log        *slog.Logger
	// Durable, when set, is told of each snapshot made durable and reported
	// to the master: the local rank, the step and the round that saved it.
	// It is called from the persisting goroutine and must not block.
	Durable func(local int, step int64, round int)
	// Saved and Persisted, when set, are told of each snapshot a worker
	// saved into memory (the time from its begin to its commit call, and
	// its bytes) and of each rank's file written to storage (the time of
	// the write and its bytes). They must not block.
	Saved, Persisted func(d time.Duration, bytes int64)
	// BackupBytes bounds the shared memory the backups this node keeps of
	// another node's shards may take: below 0, automatic (as much as the
	// node's own arenas take, at least 64 MiB); 0 keeps none and pushes
	// none (backup peers off).
	BackupBytes int64
	// Pushed and PushFailed, when set, are told of each shard pushed to
	// the backup peer (the time of the push and its bytes) and of each
	// push that failed. They must not block.
	Pushed     func(d time.Duration, bytes int64)
	PushFailed func()
}

// Saver is the node's flash-checkpoint saver.
type Saver struct {
	cfg       Config
	arenas    *arenas
	persister *persister
	// backups keeps another node's shards; pusher pushes this node's.
	backups *backupArenas
	pusher  *backupPusher
	// storage is the job's checkpoint storage, as the master last said
	// (nil: not known yet).
	storage atomic.Pointer[jobconfig.CheckpointStorage]
	// begun is when each local rank's save in progress began.
	begunMu sync.Mutex
	begun   map[int]time.Time
}

// Open opens the arenas of the job's node (those a killed agent of the job
// left on this node, or none) and returns a saver that persists nothing
// until Run.
func Open(cfg Config) (*Saver, error) {
	ar, err := newArenas(cfg.JobKey, cfg.Owner, cfg.NprocPerNode)
	if err != nil {
		return nil, err
	}
	s := &Saver{cfg: cfg, arenas: ar, begun: map[int]time.Time{}}
	s.persister = newPersister(ar, cfg, func() string { return s.Storage().URL })
	s.initBackups(ar.dir.adopted)
	return s, nil
}

// initBackups makes the saver's backup keeping and pushing.
func (s *Saver) initBackups(adopted bool) {
	s.backups = newBackupArenas(s.arenas.dir.path, adopted, s.backupBudget, s.cfg.Log)
	s.pusher = newBackupPusher(s)
}

// backupBudget is the most shared memory the node's backups may take
// (Config.BackupBytes).
func (s *Saver) backupBudget() int64 {
	switch b := s.cfg.BackupBytes; {
	case b < 0:
		return max(s.arenas.bytes(), minAutoBackupBytes)
	default:
		return b
	}
}

// ArenaBytes is the size of the node's arenas' slots, together: the
// shared memory the snapshots may fill.
func (s *Saver) ArenaBytes() int64 { return s.arenas.bytes() }

// BackupBytes is the size of the backup arenas' slots, together: the
// shared memory the backups of another node's shards take.
func (s *Saver) BackupBytes() int64 { return s.backups.bytes() }

// saveBegun and saveCommitted time a local rank's save for Config.Saved.
func (s *Saver) saveBegun(local int) {
	if s.cfg.Saved == nil {
		return
	}
	s.begunMu.Lock()
	s.begun[local] = time.Now()
	s.begunMu.Unlock()
}

func (s *Saver) saveCommitted(local int, n int64) {
	if s.cfg.Saved == nil {
		return
	}
	s.begunMu.Lock()
	t, ok := s.begun[local]
	delete(s.begun, local)
	s.begunMu.Unlock()
	if ok {
		s.cfg.Saved(time.Since(t), n)
	}
}

// Close unmaps and deletes every arena, and the arena directory.
func (s *Saver) Close() {
	s.backups.close()
	s.arenas.close()
}

// Adopted lists the local ranks whose arenas came from a killed agent.
func (s *Saver) Adopted() []int { return s.arenas.adopted() }

// Inventory lists the committed snapshots in memory, the node's own and
// the backups it keeps, for the join request.
func (s *Saver) Inventory() []*roverv1.MemorySnapshot {
	return append(s.arenas.inventory(), s.backups.inventory()...)
}

// Run persists the snapshots the workers ask for, and pushes their shards
// to the backup peer, until ctx ends; then it closes storage, and nothing
// more is persisted.
func (s *Saver) Run(ctx context.Context) {
	pushed := make(chan struct{})
	go func() {
		defer close(pushed)
		s.pusher.run(ctx)
	}()
	s.persister.run(ctx)
	<-pushed
}

// Drain waits until no persistence is queued or running (see persister.drain).
func (s *Saver) Drain(ctx context.Context) { s.persister.drain(ctx) }

// PersistOnFailure writes what memory holds newer than what each rank made
// durable, once the workers are stopped (see persister.persistOnFailure).
func (s *Saver) PersistOnFailure(ctx context.Context) { s.persister.persistOnFailure(ctx) }

// Storage is the job's checkpoint storage (URL "": none).
func (s *Saver) Storage() jobconfig.CheckpointStorage {
	if st := s.storage.Load(); st != nil {
		return *st
	}
	return jobconfig.CheckpointStorage{}
}

// SetStorage records the job's checkpoint storage the master answered.
func (s *Saver) SetStorage(st jobconfig.CheckpointStorage) { s.storage.Store(&st) }

// LocalAPI returns the checkpoint calls of the workers' local API.
func (s *Saver) LocalAPI() *LocalAPI { return &LocalAPI{sv: s} }
