package diagnosis

import (
	"fmt"
	"slices"
	"strings"
)

// DeviceSample is one accelerator's health over a sample period, as the
// node agent reads it from NVML: utilisation, the Xid errors and the
// uncorrectable ECC errors of the period.
type DeviceSample struct {
	Index          int
	Utilization    int // 0-100, -1 unknown
	Xids           []int
	ECCUncorrected int64
}

// DeviceError says whether samples show a hardware fault (an Xid with a
// hardware code, see the rule "hardware-log", or an uncorrectable ECC
// error) and describes it in the words the rules match, so that a failure
// with it as its message is diagnosed as Hardware: RelaunchNode, host
// marked bad. Xids that are faults of the program (13, 31, 43, ...) are
// not device errors: the program's own failure reports them.
func DeviceError(samples []DeviceSample) (string, bool) {
	var parts []string
	for _, s := range samples {
		for _, x := range s.Xids {
			if slices.Contains(hardwareXids, x) {
				parts = append(parts, fmt.Sprintf("NVML reports Xid %d on GPU %d", x, s.Index))
			}
		}
		if s.ECCUncorrected > 0 {
			parts = append(parts, fmt.Sprintf("NVML reports %d uncorrectable ECC error(s) on GPU %d", s.ECCUncorrected, s.Index))
		}
	}
	if len(parts) == 0 {
		return "", false
	}
	return strings.Join(parts, "; "), true
}
