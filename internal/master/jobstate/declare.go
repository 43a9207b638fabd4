package jobstate

import (
	"errors"
	"fmt"

	"github.com/roverml/rover/internal/jobconfig"
)

// A job's checkpoint storage is job configuration. A launcher names it
// (`rover master --checkpoint-dir`, the first agent's `rover run
// --checkpoint-dir`, the job spec); when none does, the job's own script
// may declare it: a worker's Checkpointer(dir, keep) asks its agent, which
// forwards the declaration to the master. The first declaration sets the
// job's storage, journaled like the rest of its configuration, so that a
// restarted master keeps it and every node and rank sees the same; a later
// one must agree with it. The rule, location and keep:
//
//   - a job without storage takes the declared location, with the declared
//     keep (or the default, which a later declaration may still set);
//   - a job with storage accepts the same location (or none), and refuses
//     another, saying what the job has and what was asked;
//   - a declared keep replaces a launcher's default keep once (no
//     --checkpoint-keep was given), and must equal a keep that was given
//     or already declared.

// ErrStorageConflict: a checkpointer declared storage other than the job's.
var ErrStorageConflict = errors.New("checkpoint storage conflict")

// StorageDeclaration is one checkpointer's declaration, as its agent
// forwarded it; Keep nil names none. It is the journal's declare field.
type StorageDeclaration struct {
	Node string `json:"node"`
	URL  string `json:"url,omitempty"`
	Keep *int   `json:"keep,omitempty"`
}

// SameLocation reports whether two storage URLs name the same storage
// (ckpt.SameLocation, which the master passes in: the comparison knows
// storage schemes that a pure package does not import).
type SameLocation func(a, b string) bool

// DeclareStorage applies d to the job's storage: the storage after it,
// whether that changed, or why d is refused (ErrStorageConflict).
func DeclareStorage(job jobconfig.CheckpointStorage, d StorageDeclaration, same SameLocation) (jobconfig.CheckpointStorage, bool, error) {
	out, changed := job, false
	switch {
	case d.URL == "":
	case job.URL == "":
		out = jobconfig.CheckpointStorage{URL: d.URL, Keep: jobconfig.DefaultCheckpointKeep, KeepDefault: true, Declared: true}
		changed = true
	case !same(job.URL, d.URL):
		return job, false, fmt.Errorf("%w: the job's script asks for checkpoint storage %s, but the job's checkpoints go to %s (%s): "+
			"give that location to the Checkpointer, or none", ErrStorageConflict, d.URL, job.URL, storageOrigin(job))
	}
	if d.Keep == nil || out.URL == "" {
		return out, changed, nil // keep means nothing without storage
	}
	switch {
	case out.KeepDefault:
		out.Keep, out.KeepDefault, changed = *d.Keep, false, true
	case out.Keep != *d.Keep:
		return job, false, fmt.Errorf("%w: the job's script asks to keep %d committed checkpoint steps, but the job keeps %d "+
			"(set by --checkpoint-keep, or by the job's first Checkpointer that gave keep): give keep=%d, or none",
			ErrStorageConflict, *d.Keep, out.Keep, out.Keep)
	}
	return out, changed, nil
}

// storageOrigin says who set the job's storage, for messages.
func storageOrigin(s jobconfig.CheckpointStorage) string {
	if s.Declared {
		return "declared by the job's first Checkpointer"
	}
	return "the launcher's --checkpoint-dir"
}
