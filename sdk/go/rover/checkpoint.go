package rover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"golang.org/x/sys/unix"
)

// Checkpoint modes: how the ranks' snapshots make up a checkpoint.
const (
	// ModeSharded: every rank saves its own part of the state (FSDP, ZeRO),
	// and a checkpoint needs every rank's file.
	ModeSharded = "sharded"
	// ModeReplicated: every rank holds the same state (DDP), and any one
	// rank's file restores all of them. One copy per node is kept in
	// memory: local rank 0's saves; the other local ranks' saves return at
	// once, and they load local rank 0's copy.
	ModeReplicated = "replicated"
)

// ErrShmTooSmall is wrapped by the error of a save that the agent could not
// give shared memory to: the file system of its arenas (normally /dev/shm)
// has too little free space. The message says how much was needed and how
// much is free; mount a larger /dev/shm (docker's --shm-size, or a
// memory-backed emptyDir with a sizeLimit in Kubernetes).
var ErrShmTooSmall = ckpt.ErrShmTooSmall

// ErrPersist is wrapped by the error of [Checkpointer.Wait] when writing a
// snapshot to storage failed since the previous Wait. The message says why.
// The snapshot is still in memory; training can go on and persist a later
// step.
var ErrPersist = errors.New("persisting a checkpoint failed")

// metaHeaderMax bounds a snapshot's JSON header, as the safetensors format
// does; a larger length is taken for corruption.
const metaHeaderMax = 100_000_000

// Tensor is one named tensor of a snapshot: its safetensors dtype ("F32",
// "BF16", "I64", "U8", "BOOL"...), its shape (empty for a scalar) and its
// raw little-endian bytes.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

// CheckpointOptions configures a [Checkpointer]. The zero value saves
// sharded snapshots with the rank and world size of the environment and
// keeps every committed step in storage.
type CheckpointOptions struct {
	// Keep, when not 0, is how many committed steps this checkpointer
	// declares the job keeps in storage: it applies when the launcher gave
	// no --checkpoint-keep (and no earlier declaration gave one), and must
	// equal the job's keep otherwise, else calls report what the job has.
	Keep int
	// Mode is ModeSharded (the default, for "") or ModeReplicated.
	Mode string
	// Rank and WorldSize are this worker's global rank and the number of
	// ranks. When WorldSize is 0, both come from RANK and WORLD_SIZE.
	Rank, WorldSize int
}

// Checkpointer saves a worker's training state to its node agent's shared
// memory (flash checkpoint) and, on request, to storage, and restores it
// after a restart. A snapshot is a safetensors file, the same format the
// Python package (rover.checkpoint) writes: its tensors, the opaque extra
// bytes as the U8 tensor "__rover_extra__", and the metadata rover.step,
// rover.rank and rover.world_size.
//
//	k := c.Checkpointer("/checkpoints/run1", rover.CheckpointOptions{Keep: 2})
//	step, tensors, extra, found, err := k.Load(ctx)
//	...
//	err = k.Save(ctx, step, tensors, extra, step%100 == 0) // persist every 100 steps
//
// The agent keeps the two snapshots each local rank wrote last; they survive
// the worker's restarts (not the agent's). Save, SaveFunc, Load, LoadStep
// and Restore must not run concurrently on one rank; Wait and Steps may run
// alongside them.
type Checkpointer struct {
	c               *Client
	url             string
	keep            int
	mode            string
	rank, worldSize int
	local           int32
	home            int32 // the local rank whose arena holds this rank's saves
	lastSaved       *int64
	// err is a bad option or environment variable, or the job's refusal of
	// the declared storage, returned by every call.
	err error
	// asked is the location the caller named ("": none); declared is set
	// once the agent answered the job's storage (url and keep).
	asked    string
	mu       sync.Mutex
	declared bool
}

// Checkpointer returns a checkpointer of this worker's state. Persisted
// checkpoints go to the job's checkpoint storage: the launcher's (`rover
// run --checkpoint-dir`, `rover master --checkpoint-dir`), else the one the
// job's workers declare: url, a directory or a URL, is declared to the
// agent by the first call, and the job's first declaration sets the
// storage for every rank and node (the master keeps it). url "" takes the
// job's storage, if any. A url or Keep other than the job's is refused:
// every call then reports what the job has and what was asked. Bad
// options are reported by the first call that uses them.
func (c *Client) Checkpointer(url string, opts CheckpointOptions) *Checkpointer {
	k := &Checkpointer{c: c, keep: opts.Keep, mode: opts.Mode, rank: opts.Rank, worldSize: opts.WorldSize}
	if k.mode == "" {
		k.mode = ModeSharded
	}
	var errs []error
	if url != "" && !strings.Contains(url, "://") {
		if abs, err := filepath.Abs(url); err == nil {
			url = abs
		}
	}
	k.asked = url
	local, err := strconv.ParseInt(c.localRank, 10, 32)
	if err != nil {
		errs = append(errs, fmt.Errorf("LOCAL_RANK %q is not a number", c.localRank))
	}
	k.local = int32(local)
	if k.home = k.local; k.mode == ModeReplicated {
		k.home = 0 // the node's copy
	}
	if opts.WorldSize == 0 {
		k.rank, k.worldSize = 0, 1
		if s := os.Getenv("RANK"); s != "" {
			if k.rank, err = strconv.Atoi(s); err != nil {
				errs = append(errs, fmt.Errorf("RANK %q is not a number", s))
			}
		}
		if s := os.Getenv("WORLD_SIZE"); s != "" {
			if k.worldSize, err = strconv.Atoi(s); err != nil {
				errs = append(errs, fmt.Errorf("WORLD_SIZE %q is not a number", s))
			}
		}
	}
	if k.mode != ModeSharded && k.mode != ModeReplicated {
		errs = append(errs, fmt.Errorf("mode %q: want %q or %q", k.mode, ModeSharded, ModeReplicated))
	}
	if k.keep < 0 {
		errs = append(errs, fmt.Errorf("keep %d is negative", k.keep))
	}
	if k.worldSize < 1 || k.rank < 0 || k.rank >= k.worldSize {
		errs = append(errs, fmt.Errorf("rank %d is not a rank of world size %d", k.rank, k.worldSize))
	}
	if len(errs) > 0 {
		k.err = fmt.Errorf("checkpointer options: %w", errors.Join(errs...))
	}
	return k
}

// ready declares the checkpointer's storage to the agent once, and takes
// the job's storage and keep from its answer. A refusal (another location
// or keep than the job's) sticks: every later call reports it; an agent
// that could not be reached is asked again by the next call.
func (k *Checkpointer) ready(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.declared || k.err != nil {
		return k.err
	}
	req := &roverv1.CheckpointStorageRequest{Url: k.asked}
	if k.keep != 0 {
		keep := int32(k.keep)
		req.Keep = &keep
	}
	r, err := k.c.api.CheckpointStorage(ctx, connect.NewRequest(req))
	switch code := connect.CodeOf(err); {
	case err == nil:
		k.url, k.keep, k.declared = r.Msg.GetUrl(), int(r.Msg.GetKeep()), true
		return nil
	case code == connect.CodeFailedPrecondition || code == connect.CodeInvalidArgument:
		k.err = fmt.Errorf("checkpoint storage %q, keep %d: %w", k.asked, k.keep, err)
		return k.err
	default:
		return fmt.Errorf("ask the agent for the job's checkpoint storage: %w", err)
	}
}

// Save copies tensors and extra (nil: none) into shared memory as the
// snapshot of step, and with persist has the agent also write it to
// storage in the background: the master commits the step once every rank
// of it is durable (see [Checkpointer.Wait]). Save blocks only for the copy.
// Each tensor's Data must have the size its dtype and shape say. When the
// agent cannot reserve the shared memory, the error wraps [ErrShmTooSmall].
func (k *Checkpointer) Save(ctx context.Context, step int64, tensors []Tensor, extra []byte, persist bool) error {
	op := fmt.Sprintf("save checkpoint step %d", step)
	if err := k.ready(ctx); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	all, layout, err := k.layout(step, tensors, extra)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	size := make(map[string]int64, len(layout.Tensors))
	for _, p := range layout.Tensors {
		size[p.Name] = p.End - p.Begin
	}
	for _, t := range all {
		if int64(len(t.Data)) != size[t.Name] {
			return fmt.Errorf("%s: tensor %q has %d bytes, its dtype %s and shape %v need %d", op, t.Name, len(t.Data), t.DType, t.Shape, size[t.Name])
		}
	}
	return k.write(ctx, op, step, layout, persist, func(dst []byte) error { return layout.Place(dst, all) })
}

// SaveFunc is Save without a copy of the state in process memory: tensors
// give only names, dtypes and shapes (their Data is ignored), and fill is
// called once for each, in file order, with dst, the tensor's bytes in the
// shared-memory slot, to write its little-endian contents into (from a
// device, say). dst is valid only during the call. An error from fill
// abandons the save: the slot is never committed, and the previous
// snapshots stay as they were.
func (k *Checkpointer) SaveFunc(ctx context.Context, step int64, tensors []Tensor, extra []byte, persist bool, fill func(t Tensor, dst []byte) error) error {
	op := fmt.Sprintf("save checkpoint step %d", step)
	if err := k.ready(ctx); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	all, layout, err := k.layout(step, tensors, extra)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	byName := make(map[string]ckpt.Tensor, len(all))
	for _, t := range all {
		byName[t.Name] = t
	}
	return k.write(ctx, op, step, layout, persist, func(dst []byte) error {
		copy(dst, layout.Header)
		for _, p := range layout.Tensors {
			t := byName[p.Name]
			if t.Name == ckpt.ExtraName {
				copy(dst[p.Begin:p.End], extra)
				continue
			}
			if err := fill(Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape}, dst[p.Begin:p.End:p.End]); err != nil {
				return fmt.Errorf("fill tensor %q: %w", t.Name, err)
			}
		}
		return nil
	})
}

// layout checks the checkpointer and lays out a snapshot of tensors and
// extra; all is tensors and the extra tensor, in ckpt's type.
func (k *Checkpointer) layout(step int64, tensors []Tensor, extra []byte) (all []ckpt.Tensor, l *ckpt.Layout, err error) {
	if step < 0 {
		return nil, nil, fmt.Errorf("step %d is negative", step)
	}
	all = make([]ckpt.Tensor, 0, len(tensors)+1)
	for _, t := range tensors {
		if t.Name == ckpt.ExtraName {
			return nil, nil, fmt.Errorf("tensor name %q is reserved for the extra bytes", t.Name)
		}
		all = append(all, ckpt.Tensor(t))
	}
	if extra != nil {
		all = append(all, ckpt.Extra(extra))
	}
	meta := map[string]string{
		ckpt.MetaStep:      strconv.FormatInt(step, 10),
		ckpt.MetaRank:      strconv.Itoa(k.rank),
		ckpt.MetaWorldSize: strconv.Itoa(k.worldSize),
		ckpt.MetaMode:      string(k.mode),
	}
	l, err = ckpt.NewLayout(all, meta)
	if err != nil {
		return nil, nil, fmt.Errorf("lay out the snapshot: %w", err)
	}
	return all, l, nil
}

// write opens a slot of l.Size bytes for step, has place fill it through a
// shared mapping of the arena, and commits it.
func (k *Checkpointer) write(ctx context.Context, op string, step int64, l *ckpt.Layout, persist bool, place func(dst []byte) error) error {
	if persist && k.url == "" {
		return fmt.Errorf("%s: persist needs checkpoint storage: name it, c.Checkpointer(DIR_OR_URL, ...), or start the job with --checkpoint-dir DIR_OR_URL", op)
	}
	k.lastSaved = &step
	if k.home != k.local {
		return nil // replicated: local rank 0 keeps the node's copy
	}
	r, err := k.c.api.CheckpointBegin(ctx, connect.NewRequest(&roverv1.CheckpointBeginRequest{LocalRank: k.local, Step: step, Size: l.Size}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeResourceExhausted {
			return fmt.Errorf("%s: reserve %d bytes of shared memory: %w", op, l.Size, &shmError{err})
		}
		return fmt.Errorf("%s: open a shared-memory slot of %d bytes: %w", op, l.Size, err)
	}
	slot := r.Msg
	if slot.GetCapacity() < l.Size {
		return fmt.Errorf("%s: the agent gave a slot of %d bytes for a snapshot of %d", op, slot.GetCapacity(), l.Size)
	}
	if err := writeSlot(slot.GetPath(), slot.GetOffset(), l.Size, place); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	req := &roverv1.CheckpointCommitRequest{LocalRank: k.local, Step: step, Length: l.Size, Persist: persist}
	if k.url != "" {
		req.Rank, req.WorldSize, req.Mode = int32(k.rank), int32(k.worldSize), k.mode
	}
	if _, err := k.c.api.CheckpointCommit(ctx, connect.NewRequest(req)); err != nil {
		return fmt.Errorf("%s: commit: %w", op, err)
	}
	return nil
}

// writeSlot maps [off, off+n) of the arena file at path shared and
// read-write, and calls place with it.
func writeSlot(path string, off, n int64, place func(dst []byte) error) error {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open the checkpoint arena: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open the checkpoint arena: %w", err)
	}
	if off < 0 || n < 0 || fi.Size()-n < off {
		return fmt.Errorf("the slot [%d, +%d) is outside the %d-byte arena %s", off, n, fi.Size(), path)
	}
	start := off - off%int64(os.Getpagesize())
	length := off - start + n
	if length != int64(int(length)) {
		return fmt.Errorf("a slot of %d bytes does not fit the address space", n)
	}
	mem, err := unix.Mmap(int(f.Fd()), start, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("map the checkpoint arena %s: %w", path, err)
	}
	err = place(mem[off-start:])
	if uerr := unix.Munmap(mem); err == nil && uerr != nil {
		err = fmt.Errorf("unmap the checkpoint arena: %w", uerr)
	}
	return err
}

// shmError is the agent's ResourceExhausted answer to CheckpointBegin: its
// message, which says what was needed and what to do, matches ErrShmTooSmall.
type shmError struct{ err error }

func (e *shmError) Error() string {
	var ce *connect.Error
	if errors.As(e.err, &ce) {
		return ce.Message()
	}
	return e.err.Error()
}

func (e *shmError) Unwrap() []error { return []error{ErrShmTooSmall, e.err} }

// Wait blocks until this rank's pending persistence is done, and returns
// the newest step this rank made durable (-1: none). In replicated mode a
// local rank other than 0 waits for the node copy's pending persistence,
// that is for what local rank 0 has saved so far. When a persistence
// failed since the previous Wait, the error wraps [ErrPersist] (durableStep
// is still returned); so does a Wait that finds that persistence was asked
// for and no step was ever made durable, naming the last failure. A
// durable rank file is not yet a committed
// checkpoint: the master commits a step once every rank of it is durable.
func (k *Checkpointer) Wait(ctx context.Context) (durableStep int64, err error) {
	if err := k.ready(ctx); err != nil {
		return 0, fmt.Errorf("wait for checkpoint persistence: %w", err)
	}
	r, err := k.c.api.CheckpointWait(ctx, connect.NewRequest(&roverv1.CheckpointWaitRequest{LocalRank: k.home}))
	if err != nil {
		return 0, fmt.Errorf("wait for checkpoint persistence: %w", err)
	}
	if msg := r.Msg.GetError(); msg != "" {
		return r.Msg.GetDurableStep(), fmt.Errorf("wait for checkpoint persistence: %w: %s", ErrPersist, msg)
	}
	if r.Msg.GetDurableStep() < 0 && r.Msg.GetRequested() > 0 {
		return -1, fmt.Errorf("wait for checkpoint persistence: %w: no step was made durable: %s", ErrPersist, r.Msg.GetLastFailure())
	}
	return r.Msg.GetDurableStep(), nil
}
