package agent

import roverv1 "github.com/roverml/rover/api/rover/v1"

// DeviceMonitor samples the node's accelerators. The agent sends the
// samples on its heartbeats, where the master's diagnosis reads them: an
// Xid or uncorrectable ECC error relaunches the node (a hardware fault),
// and utilisation goes into a hang's report. internal/nvml implements it
// with NVML in a rover built with the nvml tag (the container image);
// elsewhere agents run without one, and tests use a fake
// (docs/design/hang-and-stragglers.md).
type DeviceMonitor interface {
	// Sample returns every device's health since the previous sample.
	Sample() ([]DeviceSample, error)
}

// DeviceSample is one device's health over a sample period.
type DeviceSample struct {
	Index int
	// Utilization is 0-100, or -1 unknown.
	Utilization int
	// Xids are the Xid errors seen in the period.
	Xids []int
	// ECCUncorrected counts uncorrectable ECC errors in the period.
	ECCUncorrected int64
}

// sampleDevices samples m; a failed sample sends nothing.
func sampleDevices(m DeviceMonitor) []*roverv1.DeviceHealth {
	ss, err := m.Sample()
	if err != nil {
		return nil
	}
	out := make([]*roverv1.DeviceHealth, len(ss))
	for i, s := range ss {
		h := &roverv1.DeviceHealth{Index: int32(s.Index), UtilizationPercent: int32(s.Utilization), EccUncorrected: s.ECCUncorrected}
		for _, x := range s.Xids {
			h.Xids = append(h.Xids, int32(x))
		}
		out[i] = h
	}
	return out
}
