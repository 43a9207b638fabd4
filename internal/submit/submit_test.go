package submit

import "testing"

func TestChoosesOutput(t *testing.T) {
	tests := []struct {
		argv []string
		want bool
	}{
		{[]string{"rover", "run", "--nproc-per-node", "2", "train.py"}, false},
		{[]string{"rover", "run", "--tee", "1", "train.py"}, true},
		{[]string{"rover", "run", "--tee=1", "train.py"}, true},
		{[]string{"rover", "run", "--redirects", "3", "train.py"}, true},
		{[]string{"rover", "run", "-r", "3", "train.py"}, true},
		{[]string{"rover", "run", "-t3", "train.py"}, true},
		{[]string{"rover", "run", "--training-port", "6000", "--rdzv-id", "x", "train.py"}, false},
	}
	for _, tt := range tests {
		if got := choosesOutput(tt.argv); got != tt.want {
			t.Errorf("choosesOutput(%q) = %v, want %v", tt.argv, got, tt.want)
		}
	}
}
