package ckpt

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func info(step int64, rank int) FileInfo {
	return FileInfo{Rank: rank, Path: RankPath(step, rank), Size: 10 + int64(rank), CRC32C: uint32(step)<<8 | uint32(rank)}
}

func TestCommit(t *testing.T) {
	type durable struct {
		step int64
		rank int
	}
	tests := []struct {
		name      string
		world     int
		mode      Mode
		durable   []durable
		committed []int64 // Committed calls, after the durable reports
		step      int64   // the step to ask about
		ready     bool
		ranks     []int // ranks in the manifest, when ready
		pending   []int64
	}{
		{"sharded complete", 3, Sharded, []durable{{5, 2}, {5, 0}, {5, 1}}, nil, 5, true, []int{0, 1, 2}, []int64{5}},
		{"sharded missing rank", 3, Sharded, []durable{{5, 0}, {5, 2}}, nil, 5, false, nil, []int64{5}},
		{"sharded other step", 2, Sharded, []durable{{5, 0}, {6, 1}}, nil, 6, false, nil, []int64{5, 6}},
		{"sharded repeat report", 2, Sharded, []durable{{5, 0}, {5, 0}, {5, 1}}, nil, 5, true, []int{0, 1}, []int64{5}},
		{"replicated one rank", 4, Replicated, []durable{{5, 2}}, nil, 5, true, []int{2}, []int64{5}},
		{"replicated two ranks", 4, Replicated, []durable{{5, 3}, {5, 0}}, nil, 5, true, []int{0, 3}, []int64{5}},
		{"replicated none", 4, Replicated, nil, nil, 5, false, nil, nil},
		{"committed forgets older", 1, Sharded, []durable{{4, 0}, {5, 0}, {7, 0}}, []int64{5}, 7, true, []int{0}, []int64{7}},
		{"late report ignored", 1, Sharded, []durable{{5, 0}}, []int64{5, 5}, 5, false, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCommit(tt.world, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range tt.durable {
				if err := c.Durable(d.step, d.rank, info(d.step, d.rank)); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range tt.committed {
				c.Committed(s)
				// A report that arrives after the commit changes nothing.
				if err := c.Durable(s, 0, info(s, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.Ready(tt.step); got != tt.ready {
				t.Errorf("Ready(%d) = %v, want %v", tt.step, got, tt.ready)
			}
			if diff := cmp.Diff(tt.pending, c.Pending(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Pending (-want +got):\n%s", diff)
			}
			m, err := c.Manifest(tt.step, t0)
			if !tt.ready {
				if !errors.Is(err, ErrNotReady) {
					t.Errorf("Manifest = %v, want ErrNotReady", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Manifest{Schema: ManifestSchema, Step: tt.step, WorldSize: tt.world, Mode: tt.mode, Created: t0}
			for _, r := range tt.ranks {
				want.Files = append(want.Files, info(tt.step, r))
			}
			if diff := cmp.Diff(want, m); diff != "" {
				t.Errorf("Manifest (-want +got):\n%s", diff)
			}
			if err := m.Validate(); err != nil {
				t.Errorf("Manifest does not validate: %v", err)
			}
		})
	}
}

func TestCommitRejects(t *testing.T) {
	if _, err := NewCommit(0, Sharded); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("NewCommit(0) = %v, want ErrInvalidInput", err)
	}
	if _, err := NewCommit(1, "mirrored"); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("NewCommit(mirrored) = %v, want ErrInvalidInput", err)
	}
	c, err := NewCommit(2, Sharded)
	if err != nil {
		t.Fatal(err)
	}
	bad := info(5, 1)
	bad.Size = -1
	tests := []struct {
		name string
		step int64
		rank int
		info FileInfo
	}{
		{"negative step", -1, 0, info(-1, 0)},
		{"rank outside world", 5, 2, info(5, 2)},
		{"info of another rank", 5, 0, info(5, 1)},
		{"info of another step", 5, 1, info(4, 1)},
		{"negative size", 5, 1, bad},
	}
	for _, tt := range tests {
		if err := c.Durable(tt.step, tt.rank, tt.info); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: Durable = %v, want ErrInvalidInput", tt.name, err)
		}
	}
	if got := c.Pending(); len(got) != 0 {
		t.Errorf("rejected reports left pending steps %v", got)
	}
}
