package ckpt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gocloud.dev/blob/memblob"
)

func memBucket(t testing.TB) *Bucket {
	b := NewBucket(memblob.OpenBucket(nil), "mem://test")
	t.Cleanup(func() { b.Close() })
	return b
}

func fileBucket(t testing.TB) (*Bucket, string) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	b, err := OpenBucket(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

// rankTensors is the test state of rank at step.
func rankTensors(step int64, rank int) []Tensor {
	return []Tensor{
		{Name: "layer.weight", DType: "F32", Shape: []int64{4, 8}, Data: payload(step*1000+int64(rank), 128)},
		{Name: "layer.bias", DType: "BF16", Shape: []int64{8}, Data: payload(step*1000+int64(rank)+1, 16)},
		Extra([]byte("step " + strconv.FormatInt(step, 10))),
	}
}

func rankMeta(step int64, rank int) map[string]string {
	return map[string]string{MetaStep: strconv.FormatInt(step, 10), MetaRank: strconv.Itoa(rank)}
}

func rankFile(t testing.TB, step int64, rank int) []byte {
	var buf bytes.Buffer
	if err := Encode(&buf, rankTensors(step, rank), rankMeta(step, rank)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// commitStep persists every rank of a world of size world and commits.
func commitStep(t testing.TB, b *Bucket, step int64, world int) {
	t.Helper()
	ctx := context.Background()
	c, err := NewCommit(world, Sharded)
	if err != nil {
		t.Fatal(err)
	}
	for r := range world {
		info, err := PersistRank(ctx, b, step, r, rankFile(t, step, r))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Durable(step, r, info); err != nil {
			t.Fatal(err)
		}
	}
	m, err := c.Manifest(step, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteManifestAndLatest(ctx, b, m); err != nil {
		t.Fatal(err)
	}
}

// checkLoads checks that LoadLatest returns step and that every rank loads
// its own state.
func checkLoads(t testing.TB, b *Bucket, step int64, world int) {
	t.Helper()
	ctx := context.Background()
	m, err := LoadLatest(ctx, b)
	if err != nil {
		t.Fatalf("LoadLatest: %v", err)
	}
	if m.Step != step || m.WorldSize != world {
		t.Fatalf("LoadLatest = step %d world %d, want step %d world %d", m.Step, m.WorldSize, step, world)
	}
	for r := range world {
		tensors, meta, err := LoadRank(ctx, b, m, r)
		if err != nil {
			t.Fatalf("LoadRank(%d): %v", r, err)
		}
		if diff := cmp.Diff(byName(rankTensors(step, r)), byName(tensors)); diff != "" {
			t.Errorf("rank %d tensors (-want +got):\n%s", r, diff)
		}
		if diff := cmp.Diff(rankMeta(step, r), meta); diff != "" {
			t.Errorf("rank %d metadata (-want +got):\n%s", r, diff)
		}
	}
}

func TestPersistAndLoad(t *testing.T) {
	fb, dir := fileBucket(t)
	for _, tt := range []struct {
		name string
		b    *Bucket
	}{{"mem", memBucket(t)}, {"file", fb}} {
		t.Run(tt.name, func(t *testing.T) {
			commitStep(t, tt.b, 1, 3)
			checkLoads(t, tt.b, 1, 3)
			commitStep(t, tt.b, 2, 3)
			checkLoads(t, tt.b, 2, 3)
			if m, err := FindLatest(context.Background(), tt.b, VerifySize); err != nil || m.Step != 2 {
				t.Errorf("FindLatest(VerifySize) = step %d, %v; want 2", m.Step, err)
			}
		})
	}
	// On disk: exactly the documented layout; no sidecars, no temporaries.
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	var want []string
	for _, s := range []int64{1, 2} {
		want = append(want, ManifestPath(s), RankPath(s, 0), RankPath(s, 1), RankPath(s, 2))
	}
	want = append(want, LatestKey)
	slices.Sort(want)
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("files in %s (-want +got):\n%s", dir, diff)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, LatestKey)); string(got) != "2\n" {
		t.Errorf("latest marker = %q, want %q", got, "2\n")
	}
}

func TestReplicatedCheckpoint(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	c, _ := NewCommit(4, Replicated)
	info, err := PersistRank(ctx, b, 3, 0, rankFile(t, 3, 0))
	if err != nil {
		t.Fatal(err)
	}
	c.Durable(3, 0, info)
	m, err := c.Manifest(3, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteManifestAndLatest(ctx, b, m); err != nil {
		t.Fatal(err)
	}
	m, err = LoadLatest(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 4 { // every rank restores from rank 0's file
		tensors, _, err := LoadRank(ctx, b, m, r)
		if err != nil {
			t.Fatalf("LoadRank(%d): %v", r, err)
		}
		if diff := cmp.Diff(byName(rankTensors(3, 0)), byName(tensors)); diff != "" {
			t.Errorf("rank %d (-want +got):\n%s", r, diff)
		}
	}
	if _, _, err := LoadRank(ctx, b, m, 4); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("LoadRank outside the world = %v, want ErrInvalidInput", err)
	}
}

func TestPersistRankRefuses(t *testing.T) {
	good := rankFile(t, 5, 1)
	tests := []struct {
		name    string
		step    int64
		rank    int
		payload []byte
		want    error
		msg     string
	}{
		{"not safetensors", 5, 1, []byte("hello, world"), ErrCorrupt, "refusing to persist"},
		{"truncated", 5, 1, good[:len(good)-1], ErrCorrupt, "refusing to persist"},
		{"other step", 6, 1, good, ErrCorrupt, `rover.step="5"`},
		{"other rank", 5, 2, good, ErrCorrupt, `rover.rank="1"`},
		{"negative step", -1, 1, good, ErrInvalidInput, "step -1"},
	}
	b := memBucket(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PersistRank(context.Background(), b, tt.step, tt.rank, tt.payload)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("PersistRank = %v, want %v mentioning %q", err, tt.want, tt.msg)
			}
		})
	}
	if steps, _ := b.listSteps(context.Background()); len(steps) != 0 {
		t.Errorf("refused payloads were written: steps %v", steps)
	}
}

func TestPersistRankStorageFailure(t *testing.T) {
	ctx := context.Background()
	t.Run("writes fail", func(t *testing.T) {
		_, b := newFaulty(memblob.OpenBucket(nil), 0)
		_, err := PersistRank(ctx, b, 5, 1, rankFile(t, 5, 1))
		if !errors.Is(err, ErrStorage) || !errors.Is(err, errInjected) {
			t.Fatalf("PersistRank = %v, want ErrStorage wrapping the cause", err)
		}
		for _, s := range []string{"faulty://bucket", RankPath(5, 1), "no space left on device"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
	})
	t.Run("storage keeps less than it acknowledged", func(t *testing.T) {
		d, b := newFaulty(memblob.OpenBucket(nil), -1)
		d.lie = true
		_, err := PersistRank(ctx, b, 5, 1, rankFile(t, 5, 1))
		if !errors.Is(err, ErrStorage) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "read back") {
			t.Fatalf("PersistRank = %v, want a failed read-back check", err)
		}
	})
	t.Run("file system refuses", func(t *testing.T) {
		b, dir := fileBucket(t)
		if err := os.WriteFile(filepath.Join(dir, StepDir(5)[:len(StepDir(5))-1]), nil, 0o600); err != nil {
			t.Fatal(err) // a file where the step directory should go
		}
		_, err := PersistRank(ctx, b, 5, 1, rankFile(t, 5, 1))
		if !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "file://"+dir) || !strings.Contains(err.Error(), "not a directory") {
			t.Fatalf("PersistRank = %v, want ErrStorage naming the URL and the cause", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		b := memBucket(t)
		if _, err := PersistRank(ctx, b, 5, 1, rankFile(t, 5, 1)); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrStorage) {
			t.Fatalf("PersistRank = %v, want ErrStorage wrapping context.Canceled", err)
		}
		if ok, _ := b.b.Exists(context.Background(), RankPath(5, 1)); ok {
			t.Error("a cancelled write created the object")
		}
	})
}

func TestOpenBucket(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "plain path")
	b, err := OpenBucket(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	commitStep(t, b, 1, 1)
	if _, err := os.Stat(filepath.Join(dir, RankPath(1, 0))); err != nil {
		t.Errorf("plain path bucket: %v", err)
	}
	if b.URL() != dir {
		t.Errorf("URL = %q, want %q", b.URL(), dir)
	}
	m, err := OpenBucket(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	// This package's tests do not link the cloud drivers (see TestDependencies).
	_, err = OpenBucket(ctx, "s3://bucket/prefix")
	if !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "s3://bucket/prefix") || !strings.Contains(err.Error(), "import github.com/roverml/rover/internal/ckpt/cloudblob") {
		t.Errorf("OpenBucket(s3) without the driver = %v, want ErrStorage naming the URL and the import", err)
	}
	_, err = OpenBucket(ctx, "gopher://bucket")
	if !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "available schemes: file, mem") || strings.Contains(err.Error(), "cloudblob") {
		t.Errorf("OpenBucket(gopher) = %v, want ErrStorage listing the schemes linked, without the cloud hint", err)
	}
	_, err = OpenBucket(ctx, "s3://bucket/run1?prefix=run2/")
	if !errors.Is(err, ErrInvalidInput) {
		t.Errorf("OpenBucket with a path and a prefix = %v, want ErrInvalidInput", err)
	}
}

func TestBucketURL(t *testing.T) {
	abs, err := filepath.Abs("ckpt dir")
	if err != nil {
		t.Fatal(err)
	}
	fileDefaults := "create_dir=true&metadata=skip&no_tmp_dir=true"
	tests := []struct {
		in, want string
	}{
		{"ckpt dir", "file://" + strings.ReplaceAll(abs, " ", "%20") + "?" + fileDefaults},
		{"/ckpt", "file:///ckpt?" + fileDefaults},
		{"file:///ckpt", "file:///ckpt?" + fileDefaults},
		{"file:///ckpt?metadata=&no_tmp_dir=false", "file:///ckpt?create_dir=true&metadata=&no_tmp_dir=false"},
		{"mem://", "mem:"}, // the same URL to gocloud.dev
		{"s3://bucket", "s3://bucket"},
		{"s3://bucket/", "s3://bucket"},
		{"s3://bucket/jobs/run1?region=us-east-1", "s3://bucket?prefix=jobs%2Frun1%2F&region=us-east-1"},
		{"s3://bucket?prefix=jobs/run1/", "s3://bucket?prefix=jobs%2Frun1%2F"},
		{"gs://bucket/run1/", "gs://bucket?prefix=run1%2F"},
		{"azblob://container/run%201", "azblob://container?prefix=run+1%2F"},
	}
	for _, tt := range tests {
		u, err := bucketURL(tt.in)
		if err != nil {
			t.Errorf("bucketURL(%q): %v", tt.in, err)
			continue
		}
		if u.String() != tt.want {
			t.Errorf("bucketURL(%q) = %q, want %q", tt.in, u, tt.want)
		}
	}
}

func TestKeep(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		setup   func(t *testing.T, b *Bucket)
		n       int
		deleted []int64
		remain  []int64
		wantErr error
	}{
		{"keeps newest n", func(t *testing.T, b *Bucket) {}, 2, []int64{1, 2, 3}, []int64{4, 5}, nil},
		{"leftovers and commits in progress", func(t *testing.T, b *Bucket) {
			PersistRank(ctx, b, 0, 0, rankFile(t, 0, 0)) // never committed
			PersistRank(ctx, b, 6, 0, rankFile(t, 6, 0)) // in progress
		}, 1, []int64{0, 1, 2, 3, 4}, []int64{5, 6}, nil},
		{"marker's manifest lost", func(t *testing.T, b *Bucket) {
			b.b.Delete(ctx, ManifestPath(5))
		}, 2, []int64{1, 2}, []int64{3, 4, 5}, nil},
		{"no marker", func(t *testing.T, b *Bucket) { b.b.Delete(ctx, LatestKey) }, 1, nil, []int64{1, 2, 3, 4, 5}, nil},
		{"unreadable marker", func(t *testing.T, b *Bucket) { b.b.WriteAll(ctx, LatestKey, []byte("x"), nil) }, 1, nil, []int64{1, 2, 3, 4, 5}, ErrCorrupt},
		{"n < 1", func(t *testing.T, b *Bucket) {}, 0, nil, []int64{1, 2, 3, 4, 5}, ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := memBucket(t)
			for s := int64(1); s <= 5; s++ {
				commitStep(t, b, s, 2)
			}
			tt.setup(t, b)
			deleted, err := Keep(ctx, b, tt.n)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Keep = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.deleted, deleted, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
			steps, _ := b.listSteps(ctx)
			if diff := cmp.Diff(tt.remain, steps, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("remaining steps (-want +got):\n%s", diff)
			}
		})
	}
}
