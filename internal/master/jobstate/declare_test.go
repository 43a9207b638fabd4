package jobstate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/jobconfig"
)

func TestDeclareStorageRule(t *testing.T) {
	keep := func(n int) *int { return &n }
	const d, e = "/ckpt/run1", "/ckpt/other"
	none := jobconfig.CheckpointStorage{}
	launcherFixed := jobconfig.CheckpointStorage{URL: d, Keep: 2}
	launcherDefault := jobconfig.CheckpointStorage{URL: d, Keep: 1, KeepDefault: true}
	declared := jobconfig.CheckpointStorage{URL: d, Keep: 1, KeepDefault: true, Declared: true}
	tests := []struct {
		name    string
		job     jobconfig.CheckpointStorage
		decl    StorageDeclaration
		want    jobconfig.CheckpointStorage
		changed bool
		errs    []string // substrings of the refusal; nil: accepted
	}{
		{"first declaration sets the location", none, StorageDeclaration{URL: d}, declared, true, nil},
		{"first declaration with keep", none, StorageDeclaration{URL: d, Keep: keep(3)},
			jobconfig.CheckpointStorage{URL: d, Keep: 3, Declared: true}, true, nil},
		{"keep without storage means nothing", none, StorageDeclaration{Keep: keep(3)}, none, false, nil},
		{"asking only", declared, StorageDeclaration{}, declared, false, nil},
		{"the same location again", declared, StorageDeclaration{URL: d + "/"}, declared, false, nil},
		{"the same location as a file URL", launcherFixed, StorageDeclaration{URL: "file://" + d, Keep: keep(2)}, launcherFixed, false, nil},
		{"keep replaces a declared default", declared, StorageDeclaration{URL: d, Keep: keep(3)},
			jobconfig.CheckpointStorage{URL: d, Keep: 3, Declared: true}, true, nil},
		{"keep replaces the launcher's default", launcherDefault, StorageDeclaration{URL: d, Keep: keep(0)},
			jobconfig.CheckpointStorage{URL: d, Keep: 0}, true, nil},
		{"another location than the launcher's", launcherFixed, StorageDeclaration{URL: e}, launcherFixed, false,
			[]string{"asks for checkpoint storage " + e, "checkpoints go to " + d, "the launcher's --checkpoint-dir"}},
		{"another location than the declared one", declared, StorageDeclaration{URL: e}, declared, false,
			[]string{e, "checkpoints go to " + d, "declared by the job's first Checkpointer"}},
		{"another keep than the launcher's", launcherFixed, StorageDeclaration{URL: d, Keep: keep(3)}, launcherFixed, false,
			[]string{"asks to keep 3", "the job keeps 2", "give keep=2"}},
		{"another keep than a declared one", jobconfig.CheckpointStorage{URL: d, Keep: 3, Declared: true}, StorageDeclaration{Keep: keep(4)},
			jobconfig.CheckpointStorage{URL: d, Keep: 3, Declared: true}, false, []string{"asks to keep 4", "the job keeps 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := DeclareStorage(tt.job, tt.decl, ckpt.SameLocation)
			if tt.errs == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else {
				if err == nil {
					t.Fatalf("accepted, want a refusal")
				}
				for _, s := range tt.errs {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal %q does not say %q", err, s)
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || changed != tt.changed {
				t.Errorf("storage (-want +got):\n%s\nchanged %v, want %v", diff, changed, tt.changed)
			}
		})
	}
}
