package agent

import "testing"

func TestLinePrefix(t *testing.T) {
	tests := []struct {
		template string
		want     string
	}{
		{"", "[trainer1]:"}, // torchrun's default: role and local rank
		{"[${role_name}${rank}]:", "[trainer5]:"},
		{"${role_name}/$rank/${local_rank}| ", "trainer/5/1| "},
		{"$$rank=$rank", "$rank=5"},
		{"${unknown} $unknown $RANK", "${unknown} $unknown $RANK"}, // names are case-sensitive
		{"$rank0 ${rank}0", "$rank0 50"},
		{"${rank $ ${} ${1x} $", "${rank $ ${} ${1x} $"},
		{"$local_rank:$role_name", "1:trainer"},
		{"no substitutions", "no substitutions"},
	}
	for _, tt := range tests {
		if got := linePrefix(tt.template, "trainer", 5, 1); got != tt.want {
			t.Errorf("linePrefix(%q) = %q, want %q", tt.template, got, tt.want)
		}
	}
}
