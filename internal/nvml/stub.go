//go:build !(nvml && linux && cgo)

package nvml

import "github.com/roverml/rover/internal/agent"

// Monitor samples the node's GPUs; in this build it cannot be opened.
type Monitor struct{}

var _ agent.DeviceMonitor = (*Monitor)(nil)

// Open returns ErrNotBuilt: this rover has no NVML.
func Open() (*Monitor, error) { return nil, ErrNotBuilt }

// Sample is never reached: Open fails.
func (*Monitor) Sample() ([]agent.DeviceSample, error) { return nil, ErrNotBuilt }

// Close does nothing.
func (*Monitor) Close() error { return nil }
