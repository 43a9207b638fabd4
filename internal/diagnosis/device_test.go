package diagnosis

import "testing"

// TestDeviceError checks the NVML path with a fake's samples: a hardware
// Xid or an uncorrectable ECC error becomes a failure the rules diagnose as
// Hardware and that relaunches the node (or restarts in place where the
// platform cannot relaunch); a program's Xid or a busy device does not.
func TestDeviceError(t *testing.T) {
	tests := []struct {
		name    string
		samples []DeviceSample
		fault   bool
	}{
		{"healthy and busy", []DeviceSample{{Index: 0, Utilization: 100}, {Index: 1, Utilization: 97}}, false},
		{"idle", []DeviceSample{{Index: 0, Utilization: 0}}, false},
		{"Xid 79: fallen off the bus", []DeviceSample{{Index: 0}, {Index: 3, Xids: []int{79}}}, true},
		{"Xid 48: double-bit ECC", []DeviceSample{{Index: 1, Xids: []int{48}}}, true},
		{"Xid 13: the program's fault", []DeviceSample{{Index: 0, Xids: []int{13}}}, false},
		{"uncorrectable ECC count", []DeviceSample{{Index: 2, ECCUncorrected: 1}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, fault := DeviceError(tt.samples)
			if fault != tt.fault {
				t.Fatalf("DeviceError = %q, %v; want fault %v", msg, fault, tt.fault)
			}
			if !fault {
				return
			}
			f := Failure{NodeRank: 1, ExitCode: -1, Message: msg}
			d := Decide(History{}, f, Caps{Relaunch: true})
			if d.Cause != Hardware || d.Action != RelaunchNode || !d.MarkHostBad {
				t.Fatalf("decision on %q: %v %v (host bad %v), want hardware, relaunch-node, host bad", msg, d.Cause, d.Action, d.MarkHostBad)
			}
			if d := Decide(History{}, f, Caps{}); d.Action != RestartInPlace {
				t.Fatalf("without relaunch: %v, want restart in place", d.Action)
			}
		})
	}
}
