package jobspec

import "testing"

func TestParseQuantity(t *testing.T) {
	tests := []struct {
		in    string
		milli int64
		bad   bool
	}{
		{"2", 2000, false}, {"500m", 500, false}, {"0.5", 500, false}, {"4Gi", 4 << 30 * 1000, false},
		{"1k", 1e6, false}, {"1e3", 1e6, false}, {"1E-3", 1, false}, {"+1", 1000, false}, {"1.5Mi", 1.5 * (1 << 20) * 1000, false},
		{"", 0, true}, {"-1", 0, true}, {"2x", 0, true}, {"m", 0, true}, {"1.2.3", 0, true}, {"0.0001", 0, true},
		{"100Ei", 0, true}, {"1e", 0, true}, {"1e999", 0, true},
	}
	for _, tt := range tests {
		q, err := ParseQuantity(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && q.Milli != tt.milli) {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d, bad %v", tt.in, q.Milli, err, tt.milli, tt.bad)
		}
	}
	if v := (Quantity{Milli: 500}).Value(); v != 1 {
		t.Errorf("Value of 500m = %d, want 1", v)
	}
}
