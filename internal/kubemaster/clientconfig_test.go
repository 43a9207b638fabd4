package kubemaster

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestClientConfigLimits: the master's clients get its own limits, whatever
// the config they start from carries (client-go's 5 and 10 when unset, the
// test environment's 1000 and 2000), and the caller's config is not changed.
func TestClientConfigLimits(t *testing.T) {
	tests := []struct {
		name      string
		in        rest.Config
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{"client-go's defaults", rest.Config{}, 0, 0, DefaultQPS, DefaultBurst},
		{"a test environment's", rest.Config{QPS: 1000, Burst: 2000}, 0, 0, DefaultQPS, DefaultBurst},
		{"a rate limiter of its own", rest.Config{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(1, 1)}, 0, 0, DefaultQPS, DefaultBurst},
		{"flags", rest.Config{}, 50, 80, 50, 80},
		{"a burst below the rate", rest.Config{}, 50, 10, 50, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			got := ClientConfig(&in, tt.qps, tt.burst)
			if got.QPS != tt.wantQPS || got.Burst != tt.wantBurst || got.RateLimiter != nil {
				t.Errorf("ClientConfig = QPS %v, burst %d, limiter %v; want %v, %d, none", got.QPS, got.Burst, got.RateLimiter, tt.wantQPS, tt.wantBurst)
			}
			if in.QPS != tt.in.QPS || in.Burst != tt.in.Burst {
				t.Errorf("ClientConfig changed its argument to QPS %v, burst %d", in.QPS, in.Burst)
			}
		})
	}
}
