package ckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ManifestSchema is the "schema" of the manifests this package writes and
// reads.
const ManifestSchema = 1

// Mode says how a checkpoint's state is spread over the ranks.
type Mode string

const (
	// Sharded: each rank holds a different part of the state (FSDP, ZeRO,
	// Megatron), so a checkpoint has one file per rank, all required.
	Sharded Mode = "sharded"
	// Replicated: every rank holds the same state (DDP), so one file
	// suffices; a checkpoint lists the files of the ranks that wrote one,
	// and any of them can restore any rank.
	Replicated Mode = "replicated"
)

// FileInfo describes one persisted rank file.
type FileInfo struct {
	Rank   int    `json:"rank"`
	Path   string `json:"path"` // the object's key in the bucket: RankPath(step, rank)
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// Manifest describes one committed checkpoint step: manifest.json in the
// step's directory, written after every file it lists is durable.
type Manifest struct {
	Schema    int        `json:"schema"`
	Step      int64      `json:"step"`
	WorldSize int        `json:"world_size"`
	Mode      Mode       `json:"mode"`
	Files     []FileInfo `json:"files"` // by rank
	Created   time.Time  `json:"created"`
}

// Storage layout: one directory per step, and a marker naming the committed
// step.
const (
	// LatestKey is the object holding the committed step, in decimal,
	// ending in a newline (a marker without one is taken as torn).
	LatestKey = "latest"
	// ManifestName is the manifest's name in its step directory.
	ManifestName = "manifest.json"
)

// StepDir is the directory (key prefix, ending in "/") of step's files.
func StepDir(step int64) string { return fmt.Sprintf("step-%012d/", step) }

// RankPath is the key of rank's file for step.
func RankPath(step int64, rank int) string {
	return fmt.Sprintf("%srank-%05d.safetensors", StepDir(step), rank)
}

// ManifestPath is the key of step's manifest.
func ManifestPath(step int64) string { return StepDir(step) + ManifestName }

// parseStepDir returns the step of a key prefix written by StepDir.
func parseStepDir(prefix string) (int64, bool) {
	s, ok := strings.CutPrefix(prefix, "step-")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "/")
	if !ok || s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	step, err := strconv.ParseInt(s, 10, 64)
	return step, err == nil && StepDir(step) == prefix
}

// Validate checks that m is a well-formed manifest: schema 1, a known mode,
// files sorted by rank with one file per rank in [0, WorldSize), each at
// its canonical path (which keeps every step's files inside its own
// directory), and for Sharded a file for every rank.
func (m *Manifest) Validate() error {
	switch {
	case m.Schema != ManifestSchema:
		return fmt.Errorf("manifest schema %d, this build reads %d", m.Schema, ManifestSchema)
	case m.Step < 0:
		return fmt.Errorf("manifest step %d is negative", m.Step)
	case m.WorldSize < 1:
		return fmt.Errorf("manifest world size %d", m.WorldSize)
	case m.Mode != Sharded && m.Mode != Replicated:
		return fmt.Errorf("manifest mode %q: want %q or %q", m.Mode, Sharded, Replicated)
	case len(m.Files) == 0:
		return fmt.Errorf("manifest of step %d lists no files", m.Step)
	case m.Mode == Sharded && len(m.Files) != m.WorldSize:
		return fmt.Errorf("sharded manifest of step %d lists %d files for world size %d", m.Step, len(m.Files), m.WorldSize)
	}
	for i, f := range m.Files {
		switch {
		case f.Rank < 0 || f.Rank >= m.WorldSize:
			return fmt.Errorf("manifest file of rank %d, outside world size %d", f.Rank, m.WorldSize)
		case i > 0 && f.Rank <= m.Files[i-1].Rank:
			return fmt.Errorf("manifest files not sorted by rank, or rank %d twice", f.Rank)
		case f.Path != RankPath(m.Step, f.Rank):
			return fmt.Errorf("manifest file of rank %d has path %q, want %q", f.Rank, f.Path, RankPath(m.Step, f.Rank))
		case f.Size < 0:
			return fmt.Errorf("manifest file of rank %d has size %d", f.Rank, f.Size)
		}
	}
	return nil
}

// File returns the file that restores rank: its own; in Replicated mode,
// the lowest rank's if it has none.
func (m *Manifest) File(rank int) (FileInfo, bool) {
	for _, f := range m.Files {
		if f.Rank == rank {
			return f, true
		}
	}
	if m.Mode == Replicated && len(m.Files) > 0 && rank >= 0 && rank < m.WorldSize {
		return m.Files[0], true
	}
	return FileInfo{}, false
}

// MarshalManifest validates m and encodes it as indented JSON.
func MarshalManifest(m Manifest) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, invalidf("%v", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, invalidf("encoding manifest: %v", err)
	}
	return append(b, '\n'), nil
}

// ParseManifest decodes and validates a manifest. Unknown fields, trailing
// data and anything Validate rejects are ErrCorrupt.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, corruptf("manifest: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, corruptf("manifest: data after the JSON object")
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, corruptf("%v", err)
	}
	return m, nil
}

func formatLatest(step int64) []byte { return []byte(strconv.FormatInt(step, 10) + "\n") }

// parseLatest reads the latest marker: decimal digits and a newline.
func parseLatest(b []byte) (int64, error) {
	s, ok := strings.CutSuffix(string(b), "\n")
	if !ok || s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, corruptf("latest marker %q: want a step number and a newline", b)
	}
	step, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, corruptf("latest marker %q: %v", b, err)
	}
	return step, nil
}
