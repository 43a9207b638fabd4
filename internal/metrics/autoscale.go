package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// The auto-scaling policy's metrics (docs/design/autoscale.md), read from
// GetJob's auto_scale; absent while auto-scaling is off.
var (
	autoScaleTargetDesc     = desc("rover_autoscale_target_nodes", "The node count the auto-scaling policy asks for.")
	autoScaleCapacityDesc   = desc("rover_autoscale_capacity_nodes", "The nodes the platform can place for the job, as the policy knows it; -1 unknown.")
	autoScaleChangesDesc    = desc("rover_autoscale_changes_total", "Changes (grow, shrink, replace) the auto-scaling policy decided over the job's life.")
	autoScaleThroughputDesc = desc("rover_autoscale_throughput", "The throughput measured at a world size, in the unit its label names (samples_per_second or steps_per_second).", "nodes", "unit")
	autoScaleTrustedDesc    = desc("rover_autoscale_throughput_trusted", "1 when a world size's throughput has enough samples for the policy to act on, else 0.", "nodes")
)

var autoScaleDescs = []*prometheus.Desc{autoScaleTargetDesc, autoScaleCapacityDesc, autoScaleChangesDesc, autoScaleThroughputDesc, autoScaleTrustedDesc}

// collectAutoScale sends the policy's metrics; nothing when it is off. The
// sizes are at most the job's --nnodes maximum, so their label is bounded.
func collectAutoScale(a *roverv1.AutoScaleStatus, gauge, counter func(*prometheus.Desc, float64, ...string)) {
	if a == nil {
		return
	}
	gauge(autoScaleTargetDesc, float64(a.GetTargetNodes()))
	gauge(autoScaleCapacityDesc, float64(a.GetCapacity()))
	counter(autoScaleChangesDesc, float64(a.GetChanges()))
	unit := "steps_per_second"
	if a.GetUnit() == "samples/s" {
		unit = "samples_per_second"
	}
	for _, s := range a.GetSizes() {
		n := strconv.Itoa(int(s.GetNodes()))
		gauge(autoScaleThroughputDesc, s.GetThroughput(), n, unit)
		gauge(autoScaleTrustedDesc, boolValue(s.GetTrusted()), n)
	}
}
