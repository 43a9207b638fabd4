package kubestore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// chunkRequests bounds the chunk objects written or read at once.
const chunkRequests = 4

// A snapshot's generation is "<epoch>.<n>": the n-th snapshot of the store
// that took the state over at that epoch. Two masters therefore never write
// the same chunk, even when one of them is fenced and does not know it yet.

// chunkName returns the name of chunk i of generation gen.
func (s *Store) chunkName(gen string, i int) string {
	return fmt.Sprintf("%s-snap-%s-%d", s.opts.Name, gen, i)
}

// Snapshot replaces the snapshot with state, which must reflect every record
// appended so far, and drops those records. It writes the chunks of a new
// generation, then moves the head to them with a compare-and-swap (dropping
// the records in the same write), then deletes the old chunks: the head
// never names a chunk that is not there. An empty state is no snapshot.
func (s *Store) Snapshot(ctx context.Context, state []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	old := s.h
	h := head{owner: old.owner, epoch: old.epoch, start: s.next}
	if len(state) > 0 {
		s.gens++
		h.snap = fmt.Sprintf("%d.%d", h.epoch, s.gens)
		h.size, h.crc = len(state), crc32.Checksum(state, castagnoli)
		h.chunks = (len(state) + ChunkBytes - 1) / ChunkBytes
		if err := s.writeChunks(ctx, h, state); err != nil {
			return fmt.Errorf("snapshot %d bytes of master state into %s/%s: %w", len(state), s.opts.Namespace, s.opts.Name, err)
		}
	}
	for attempt := 0; ; attempt++ {
		cm := s.head.DeepCopy()
		h.write(cm)
		cm.BinaryData = nil
		s.own(cm)
		updated, err := s.cm.Update(ctx, cm, metav1.UpdateOptions{})
		if err == nil {
			if err := s.adopt(updated); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			break
		}
		if err := s.lost(ctx, err, attempt); err != nil {
			if errors.Is(err, ErrFenced) {
				// The write was refused, so no head names the new
				// chunks; anything else may have landed.
				s.deleteChunks(context.WithoutCancel(ctx), h)
			}
			return fmt.Errorf("snapshot: move the head %s to generation %q: %w", s.opts.Name, h.snap, err)
		}
	}
	s.deleteChunks(ctx, old)
	return nil
}

// writeChunks creates the chunk objects of h's generation.
func (s *Store) writeChunks(ctx context.Context, h head, state []byte) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(chunkRequests)
	for i := range h.chunks {
		piece := state[i*ChunkBytes : min(len(state), (i+1)*ChunkBytes)]
		cm := s.object(s.chunkName(h.snap, i), partSnapshot)
		cm.Labels[labelEpoch] = strconv.FormatUint(h.epoch, 10)
		cm.Labels[labelGeneration] = h.snap
		cm.BinaryData = map[string][]byte{keyChunk: piece}
		immutable := true
		cm.Immutable = &immutable
		g.Go(func() error {
			if _, err := s.cm.Create(gctx, cm, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create chunk %d of %d, %s: %w", i+1, h.chunks, cm.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// readSnapshot reassembles h's snapshot and checks its size and checksum.
func (s *Store) readSnapshot(ctx context.Context, h head) ([]byte, error) {
	if h.snap == "" {
		return nil, nil
	}
	if h.chunks != (h.size+ChunkBytes-1)/ChunkBytes {
		return nil, fmt.Errorf("%w: the head names %d chunks for a snapshot of %d bytes", errDamaged, h.chunks, h.size)
	}
	state := make([]byte, h.size)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(chunkRequests)
	for i := range h.chunks {
		name := s.chunkName(h.snap, i)
		want := state[i*ChunkBytes : min(h.size, (i+1)*ChunkBytes)]
		g.Go(func() error {
			cm, err := s.cm.Get(gctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: chunk %d of %d of snapshot %s, %s, is missing", errDamaged, i+1, h.chunks, h.snap, name)
			}
			if err != nil {
				return fmt.Errorf("read chunk %s: %w", name, err)
			}
			if got := cm.BinaryData[keyChunk]; len(got) != len(want) {
				return fmt.Errorf("%w: chunk %s holds %d bytes, not %d", errDamaged, name, len(got), len(want))
			}
			copy(want, cm.BinaryData[keyChunk])
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if got := crc32.Checksum(state, castagnoli); got != h.crc {
		return nil, fmt.Errorf("%w: snapshot %s has CRC-32C %08x, and the head says %08x", errDamaged, h.snap, got, h.crc)
	}
	return state, nil
}

// deleteChunks deletes the chunks of h's generation, which no head names
// any more. Failures are logged: the next Open deletes what is left.
func (s *Store) deleteChunks(ctx context.Context, h head) {
	for i := range h.chunks {
		name := s.chunkName(h.snap, i)
		if err := s.cm.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.log.Debug("could not delete an old snapshot chunk; the next master deletes it", "chunk", name, "err", err)
		}
	}
}

// sweep deletes the chunks that neither the head nor a newer master's
// snapshot in progress can name: those of an older epoch and another
// generation than the head's. A failure is logged, not returned.
func (s *Store) sweep(ctx context.Context) {
	sel := labels.NewSelector()
	for _, r := range []struct {
		key string
		op  selection.Operator
		val string
	}{{labelState, selection.Equals, s.opts.Name}, {labelPart, selection.Equals, partSnapshot}, {labelGeneration, selection.NotEquals, s.h.snap}} {
		req, err := labels.NewRequirement(r.key, r.op, []string{r.val})
		if err != nil {
			s.log.Warn("could not look for old snapshot chunks", "err", err)
			return
		}
		sel = sel.Add(*req)
	}
	list, err := s.cm.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		s.log.Warn("could not list old snapshot chunks to delete them", "err", err)
		return
	}
	deleted := 0
	for _, cm := range list.Items {
		epoch, err := strconv.ParseUint(cm.Labels[labelEpoch], 10, 64)
		if err != nil || epoch >= s.h.epoch {
			continue
		}
		err = s.cm.Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			s.log.Warn("could not delete an old snapshot chunk", "chunk", cm.Name, "err", err)
			continue
		}
		deleted++
	}
	if deleted > 0 {
		s.log.Info("deleted snapshot chunks that no head names (a master died or was fenced mid-snapshot)", "chunks", deleted)
	}
}
