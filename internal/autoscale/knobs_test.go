package autoscale

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseKnobs(t *testing.T) {
	c, err := ParseKnobs("warmup-steps=5, warmup=10s,window=20,min-samples=8,min-gain=0.4,hysteresis=0.1,assumed-efficiency=0.8," +
		"cool-down=30s,change-timeout=5m,retry-after=-1s,straggler-for=1m,min-replace-gain=0.2," +
		"ps-hot=0.8,ps-window=20s,ps-target=0.5,ps-workers-waiting=0.3,ps-cool-down=1m,ps-change-timeout=3m")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{WarmupSteps: 5, WarmupTime: 10 * time.Second, Window: 20, MinSamples: 8, MinGain: 0.4, Hysteresis: 0.1,
		AssumedEfficiency: 0.8, CoolDown: 30 * time.Second, ChangeTimeout: 5 * time.Minute, RetryAfter: -time.Second,
		StragglerFor: time.Minute, MinReplaceGain: 0.2,
		PS: PSConfig{Hot: 0.8, Window: 20 * time.Second, Target: 0.5, WorkersWaiting: 0.3, CoolDown: time.Minute, ChangeTimeout: 3 * time.Minute}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("knobs (-want +got):\n%s", diff)
	}
	if c, err := ParseKnobs(""); err != nil || c != (Config{}) {
		t.Errorf("empty knobs = %+v, %v; want the defaults", c, err)
	}
	_, err = ParseKnobs("cool-down=soon,window=x,nope=1,max-nodes=3,min-gain,cool-down=1s")
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad knobs: %v, want ErrInvalidConfig", err)
	}
	for _, w := range []string{"cool-down=soon: not a duration", "window=x: not a whole number", "nope=1: unknown name",
		"max-nodes=3: the node counts are the job's --nnodes", `"min-gain" is not NAME=VALUE`, "cool-down is given twice"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}
