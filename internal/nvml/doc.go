// Package nvml reads the health of the node's NVIDIA GPUs through NVML
// (github.com/NVIDIA/go-nvml) for the agent's heartbeats: utilisation,
// Xid critical errors and uncorrectable ECC errors, which the master's
// diagnosis turns into a hardware fault (the node is relaunched) or into a
// hang's report. It implements agent.DeviceMonitor and nothing else.
//
// NVML needs cgo and loads libnvidia-ml at run time, so it is compiled
// only with the build tag nvml (the container image is built with it;
// `go build -tags nvml ./cmd/rover`). Without the tag, or on a machine
// without the library or GPUs, [Open] returns an error that says which,
// and the agent runs without a device monitor.
//
//	m, err := nvml.Open()
//	if err == nil {
//		defer m.Close()
//		opts.Devices = m
//	}
package nvml

import "errors"

// ErrNotBuilt is Open's error in a rover built without the nvml tag.
var ErrNotBuilt = errors.New("this rover was built without NVML (build with CGO_ENABLED=1 and -tags nvml for GPU health)")

// ErrNoDevices is Open's error when NVML loads but finds no GPU.
var ErrNoDevices = errors.New("NVML found no GPU on this node")
