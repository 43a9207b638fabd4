package ckptsaver

import (
	"testing"

	"github.com/roverml/rover/internal/client"
)

// TestSettled: the agent answers a checkpointer's declaration itself only
// when it changes nothing of the job's storage it knows; anything else
// goes to the master, which decides (and refuses with the job's message).
func TestSettled(t *testing.T) {
	keep := func(n int) *int { return &n }
	job := client.CheckpointStorage{URL: "/ckpt/run1", Keep: 3}
	defaultKeep := client.CheckpointStorage{URL: "/ckpt/run1", Keep: 1, KeepDefault: true}
	tests := []struct {
		name string
		job  client.CheckpointStorage
		url  string
		keep *int
		want bool
	}{
		{"asking only", job, "", nil, true},
		{"asking only, no storage", client.CheckpointStorage{}, "", nil, true},
		{"keep without storage", client.CheckpointStorage{}, "", keep(3), true},
		{"the job's location", job, "/ckpt/run1/", nil, true},
		{"the job's location and keep", job, "file:///ckpt/run1", keep(3), true},
		{"a first declaration", client.CheckpointStorage{}, "/ckpt/run1", nil, false},
		{"another location", job, "/ckpt/other", nil, false},
		{"another keep", job, "/ckpt/run1", keep(2), false},
		{"a keep for a default", defaultKeep, "", keep(1), false},
	}
	for _, tt := range tests {
		if got := settled(tt.job, tt.url, tt.keep); got != tt.want {
			t.Errorf("%s: settled = %v, want %v", tt.name, got, tt.want)
		}
	}
}
