package ckpt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheckLocation(t *testing.T) {
	tests := []struct {
		loc      string
		from     Location
		wantPart string // "" accepts
	}{
		{"/ckpt/run1", FromAgent, ""},
		{"file:///ckpt/run1", FromAgent, ""},
		{"s3://bucket/run1", FromAgent, ""},
		{"gs://bucket", FromAgent, ""},
		{"s3://bucket/run1?region=us-east-1", FromOperator, ""},
		{"s3://bucket/run1?endpoint=http://127.0.0.1:9000", FromOperator, ""},
		{"", FromOperator, "empty"},
		{"ckpt/run1", FromOperator, "relative path"},
		{"../x", FromAgent, "relative path"},
		{"file://host/ckpt", FromAgent, "absolute path"},
		{"file://ckpt", FromOperator, "absolute path"},
		{"http://example.com/x", FromOperator, "scheme"},
		{"s3://bucket/run1?endpoint=http://127.0.0.1:9000", FromAgent, "query parameters"},
		{"s3://bucket/run1?", FromAgent, "query parameters"},
		{"s3://id:secret@bucket/run1", FromAgent, "user information"},
		{"gs://bucket/x#frag", FromAgent, "fragment"},
		{"/ckpt/\x00", FromOperator, "printable"},
		{"/" + strings.Repeat("a", MaxLocationLen), FromOperator, "longer"},
	}
	for _, tt := range tests {
		err := CheckLocation(tt.loc, tt.from)
		switch {
		case tt.wantPart == "" && err != nil:
			t.Errorf("CheckLocation(%q, %v): %v, want accepted", tt.loc, tt.from, err)
		case tt.wantPart != "" && (err == nil || !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tt.wantPart)):
			t.Errorf("CheckLocation(%q, %v): %v, want ErrInvalidInput naming %q", tt.loc, tt.from, err, tt.wantPart)
		}
	}
	for _, same := range [][2]string{{"/a/b", "file:///a/b/"}, {"/a/b/", "/a/./b"}, {"s3://b/p/", "s3://b/p"}} {
		if !SameLocation(same[0], same[1]) {
			t.Errorf("SameLocation(%q, %q) = false", same[0], same[1])
		}
	}
	for _, other := range [][2]string{{"/a/b", "/a/c"}, {"s3://b/p", "gs://b/p"}, {"/a", "file:///a?x=1"}} {
		if SameLocation(other[0], other[1]) {
			t.Errorf("SameLocation(%q, %q) = true", other[0], other[1])
		}
	}
}

// TestVerifyFiles: a step's files check out only as reported: present, of
// the reported size, and with a header naming the step and the rank.
func TestVerifyFiles(t *testing.T) {
	ctx := context.Background()
	b, dir := fileBucket(t)
	var files []FileInfo
	for rank := range 3 {
		info, err := PersistRank(ctx, b, 7, rank, rankFile(t, 7, rank))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, info)
	}
	m := Manifest{Schema: ManifestSchema, Step: 7, WorldSize: 3, Mode: Sharded, Files: files}
	if bad, err := VerifyFiles(ctx, b, m); err != nil || bad != nil {
		t.Fatalf("VerifyFiles of intact files: %v %v", bad, err)
	}
	// Rank 1's size is misreported; rank 2's file is another step's.
	m.Files[1].Size++
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(RankPath(7, 2))), rankFile(t, 8, 2), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Files[2].Size = int64(len(rankFile(t, 8, 2)))
	bad, err := VerifyFiles(ctx, b, m)
	if !slices.Equal(bad, []int{1, 2}) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "rover.step") {
		t.Errorf("VerifyFiles: bad %v, %v; want ranks 1 and 2 corrupt, naming the step metadata", bad, err)
	}
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(RankPath(7, 0)))); err != nil {
		t.Fatal(err)
	}
	if bad, err := VerifyFiles(ctx, b, m); !slices.Contains(bad, 0) || !strings.Contains(err.Error(), "is not in") {
		t.Errorf("VerifyFiles with rank 0's file missing: %v %v", bad, err)
	}
}

// TestRemoveUncommitted: only step directories without a manifest go;
// those above the latest commit only when asked for all.
func TestRemoveUncommitted(t *testing.T) {
	ctx := context.Background()
	b, dir := fileBucket(t)
	commitStep(t, b, 4, 1)
	commitStep(t, b, 6, 1)
	for _, step := range []int64{3, 5, 9} {
		if _, err := PersistRank(ctx, b, step, 0, rankFile(t, step, 0)); err != nil {
			t.Fatal(err)
		}
	}
	steps := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "step-*"))
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m
	}
	removed, err := RemoveUncommitted(ctx, b, false)
	if err != nil || !slices.Equal(removed, []int64{3, 5}) {
		t.Fatalf("RemoveUncommitted(false) = %v, %v; want steps 3 and 5", removed, err)
	}
	removed, err = RemoveUncommitted(ctx, b, true)
	if err != nil || !slices.Equal(removed, []int64{9}) {
		t.Fatalf("RemoveUncommitted(true) = %v, %v; want step 9", removed, err)
	}
	if got := steps(); !slices.Equal(got, []string{"step-000000000004", "step-000000000006"}) {
		t.Errorf("left %v, want the committed steps 4 and 6", got)
	}
	// A failed persistence's leftovers: the file, a temporary, the directory.
	if _, err := PersistRank(ctx, b, 8, 1, rankFile(t, 8, 1)); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, filepath.FromSlash(RankPath(8, 1))) + ".18ecf85d.tmp"
	if err := os.WriteFile(tmp, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveRankFile(ctx, b, 8, 1); err != nil {
		t.Fatal(err)
	}
	if got := steps(); !slices.Equal(got, []string{"step-000000000004", "step-000000000006"}) {
		t.Errorf("after RemoveRankFile: %v, want step 8's directory gone", got)
	}
}
