//go:build nvml && linux && cgo

package nvml

import (
	"errors"
	"fmt"
	"sync"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/roverml/rover/internal/agent"
)

// Monitor samples the node's GPUs through NVML. Its methods may be called
// from several goroutines.
type Monitor struct {
	mu      sync.Mutex
	devices []gonvml.Device
	byUUID  map[string]int // device UUID -> index, to place Xid events
	events  gonvml.EventSet
	hasSet  bool
	ecc     []uint64 // uncorrectable ECC totals at the previous sample; ^0: unsupported
	closed  bool
}

var _ agent.DeviceMonitor = (*Monitor)(nil)

// Open initialises NVML and registers for the GPUs' Xid critical errors.
// It fails when libnvidia-ml cannot be loaded or there is no GPU.
func Open() (*Monitor, error) {
	if ret := gonvml.Init(); ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("initialise NVML: %s", gonvml.ErrorString(ret))
	}
	m, err := open()
	if err != nil {
		gonvml.Shutdown()
		return nil, err
	}
	return m, nil
}

func open() (*Monitor, error) {
	n, ret := gonvml.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("count the GPUs: %s", gonvml.ErrorString(ret))
	}
	if n == 0 {
		return nil, ErrNoDevices
	}
	m := &Monitor{byUUID: map[string]int{}}
	if set, ret := gonvml.EventSetCreate(); ret == gonvml.SUCCESS {
		m.events, m.hasSet = set, true
	}
	for i := range n {
		d, ret := gonvml.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			m.free()
			return nil, fmt.Errorf("open GPU %d: %s", i, gonvml.ErrorString(ret))
		}
		m.devices = append(m.devices, d)
		if uuid, ret := d.GetUUID(); ret == gonvml.SUCCESS {
			m.byUUID[uuid] = i
		}
		if m.hasSet {
			// Not every GPU reports Xids (ERROR_NOT_SUPPORTED): it is
			// then sampled for utilisation and ECC only.
			_ = d.RegisterEvents(gonvml.EventTypeXidCriticalError, m.events)
		}
		m.ecc = append(m.ecc, eccTotal(d))
	}
	return m, nil
}

// eccTotal is the device's volatile uncorrectable ECC count, or ^0 when
// the device does not count them.
func eccTotal(d gonvml.Device) uint64 {
	n, ret := d.GetTotalEccErrors(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.VOLATILE_ECC)
	if ret != gonvml.SUCCESS {
		return ^uint64(0)
	}
	return n
}

// Sample returns each GPU's utilisation now, the Xid critical errors
// since the previous sample, and the uncorrectable ECC errors since then.
func (m *Monitor) Sample() ([]agent.DeviceSample, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("the NVML monitor is closed")
	}
	out := make([]agent.DeviceSample, len(m.devices))
	for i, d := range m.devices {
		s := agent.DeviceSample{Index: i, Utilization: -1}
		if u, ret := d.GetUtilizationRates(); ret == gonvml.SUCCESS {
			s.Utilization = int(u.Gpu)
		}
		if now := eccTotal(d); now != ^uint64(0) && m.ecc[i] != ^uint64(0) && now > m.ecc[i] {
			s.ECCUncorrected = int64(now - m.ecc[i])
			m.ecc[i] = now
		} else if now != ^uint64(0) {
			m.ecc[i] = now
		}
		out[i] = s
	}
	for m.hasSet {
		ev, ret := m.events.Wait(0) // only what is queued
		if ret != gonvml.SUCCESS {
			break // ERROR_TIMEOUT: no more events
		}
		if ev.EventType != gonvml.EventTypeXidCriticalError {
			continue
		}
		idx := 0
		if uuid, ret := ev.Device.GetUUID(); ret == gonvml.SUCCESS {
			idx = m.byUUID[uuid]
		}
		out[idx].Xids = append(out[idx].Xids, int(ev.EventData))
	}
	return out, nil
}

// Close frees the event set and shuts NVML down.
func (m *Monitor) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.free()
	if ret := gonvml.Shutdown(); ret != gonvml.SUCCESS {
		return fmt.Errorf("shut NVML down: %s", gonvml.ErrorString(ret))
	}
	return nil
}

func (m *Monitor) free() {
	if m.hasSet {
		_ = m.events.Free()
		m.hasSet = false
	}
}
