package ckpt

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testManifest(step int64, world int, mode Mode, ranks ...int) Manifest {
	m := Manifest{Schema: ManifestSchema, Step: step, WorldSize: world, Mode: mode, Created: t0}
	for _, r := range ranks {
		m.Files = append(m.Files, FileInfo{Rank: r, Path: RankPath(step, r), Size: 100 + int64(r), CRC32C: uint32(r) * 0x01010101})
	}
	return m
}

func TestManifestRoundTrip(t *testing.T) {
	for _, m := range []Manifest{
		testManifest(12, 3, Sharded, 0, 1, 2),
		testManifest(0, 4, Replicated, 0),
		testManifest(1<<40, 2, Replicated, 0, 1),
	} {
		b, err := MarshalManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseManifest(b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(m, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func TestManifestInvalid(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Manifest)
		want string
	}{
		{"schema", func(m *Manifest) { m.Schema = 2 }, "schema 2"},
		{"negative step", func(m *Manifest) { m.Step = -1 }, "negative"},
		{"world size", func(m *Manifest) { m.WorldSize = 0 }, "world size 0"},
		{"mode", func(m *Manifest) { m.Mode = "mirrored" }, "mode"},
		{"no files", func(m *Manifest) { m.Files = nil }, "no files"},
		{"sharded missing rank", func(m *Manifest) { m.Files = m.Files[:2] }, "lists 2 files"},
		{"rank out of range", func(m *Manifest) { m.Files[2].Rank = 3 }, "outside world size"},
		{"unsorted", func(m *Manifest) { m.Files[0], m.Files[1] = m.Files[1], m.Files[0] }, "not sorted"},
		{"foreign path", func(m *Manifest) { m.Files[1].Path = "step-000000000011/rank-00001.safetensors" }, "want"},
		{"escaping path", func(m *Manifest) { m.Files[1].Path = "../x" }, "want"},
		{"negative size", func(m *Manifest) { m.Files[1].Size = -1 }, "size -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testManifest(12, 3, Sharded, 0, 1, 2)
			tt.edit(&m)
			if _, err := MarshalManifest(m); !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("MarshalManifest = %v, want ErrInvalidInput mentioning %q", err, tt.want)
			}
		})
	}
}

func TestParseManifestRejects(t *testing.T) {
	good, err := MarshalManifest(testManifest(5, 1, Sharded, 0))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, data, want string
	}{
		{"empty", "", "EOF"},
		{"truncated", string(good[:len(good)/2]), "unexpected EOF"},
		{"trailing", string(good) + "{}", "after the JSON"},
		{"unknown field", `{"schema":1,"extra":true}`, "unknown field"},
		{"invalid", `{"schema":1,"step":5,"world_size":1,"mode":"sharded","files":[]}`, "no files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseManifest([]byte(tt.data)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseManifest = %v, want ErrCorrupt mentioning %q", err, tt.want)
			}
		})
	}
}

func TestManifestFile(t *testing.T) {
	sharded := testManifest(3, 2, Sharded, 0, 1)
	replicated := testManifest(3, 4, Replicated, 1, 2)
	tests := []struct {
		name     string
		m        Manifest
		rank     int
		wantRank int // -1: no file
	}{
		{"sharded own", sharded, 1, 1},
		{"sharded outside", sharded, 2, -1},
		{"replicated own", replicated, 2, 2},
		{"replicated other", replicated, 3, 1},
		{"replicated outside", replicated, 4, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := tt.m.File(tt.rank)
			if got := map[bool]int{true: f.Rank, false: -1}[ok]; got != tt.wantRank {
				t.Errorf("File(%d) = rank %d, want %d", tt.rank, got, tt.wantRank)
			}
		})
	}
}

func TestParseLatest(t *testing.T) {
	tests := []struct {
		data string
		want int64 // -1: rejected
	}{
		{"12\n", 12},
		{"0\n", 0},
		{"000000000012\n", 12},
		{"9223372036854775807\n", 1<<63 - 1},
		{"12", -1}, // torn: no newline
		{"1", -1},
		{"\n", -1},
		{"", -1},
		{"-1\n", -1},
		{"+1\n", -1},
		{" 1\n", -1},
		{"1\n\n", -1},
		{"9223372036854775808\n", -1},
	}
	for _, tt := range tests {
		got, err := parseLatest([]byte(tt.data))
		if tt.want < 0 {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("parseLatest(%q) = %d, %v; want ErrCorrupt", tt.data, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseLatest(%q) = %d, %v; want %d", tt.data, got, err, tt.want)
		}
	}
	if got, err := parseLatest(formatLatest(42)); err != nil || got != 42 {
		t.Errorf("parseLatest(formatLatest(42)) = %d, %v", got, err)
	}
}

func TestPaths(t *testing.T) {
	if got, want := RankPath(12, 3), "step-000000000012/rank-00003.safetensors"; got != want {
		t.Errorf("RankPath = %q, want %q", got, want)
	}
	if got, want := ManifestPath(12), "step-000000000012/manifest.json"; got != want {
		t.Errorf("ManifestPath = %q, want %q", got, want)
	}
	tests := []struct {
		prefix string
		want   int64 // -1: not a step directory
	}{
		{"step-000000000012/", 12},
		{"step-1234567890123/", 1234567890123},
		{"step-12/", -1}, // not as StepDir writes it
		{"step-000000000012", -1},
		{"step-00000000001x/", -1},
		{"step-/", -1},
		{"latest", -1},
		{"step--00000000012/", -1},
	}
	for _, tt := range tests {
		got, ok := parseStepDir(tt.prefix)
		if !ok {
			got = -1
		}
		if got != tt.want {
			t.Errorf("parseStepDir(%q) = %d, %v; want %d", tt.prefix, got, ok, tt.want)
		}
	}
}
