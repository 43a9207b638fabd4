package runconfig

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Policy is a job's rendezvous policy: what the first agent's `rover run`
// fixes for the job, or `rover master --nnodes` fixes for every agent. Both
// commands check it with Check, so the same values are refused with the
// same messages whichever command carries them.
type Policy struct {
	MinNodes, MaxNodes int
	NodeUnit           int
	MaxRestarts        int
	JoinTimeout        time.Duration
	LastCallTimeout    time.Duration
	HeartbeatTimeout   time.Duration
	DisconnectGrace    time.Duration
	// HangTimeout and HangDetection are the job's hang detection
	// (--hang-timeout, --hang-detection).
	HangTimeout   time.Duration
	HangDetection int
	// NodeCheck is the pre-flight node check (--network-check,
	// --exclude-straggler, --comm-perf-test).
	NodeCheck NodeCheck
}

// NodeCheck is the pre-flight node check a job runs before a world with
// unchecked nodes trains (docs/design/node-check.md).
type NodeCheck struct {
	// Enabled: --network-check, or either of the others (they imply it).
	Enabled bool
	// ExcludeStragglers: --exclude-straggler.
	ExcludeStragglers bool
	// CommPerf: --comm-perf-test (the collective moves more data).
	CommPerf bool
}

// The settings of a Policy, by their `rover master` flag names: what Check
// passes to its ref function.
const (
	SettingNNodes           = "nnodes"
	SettingNodeUnit         = "node-unit"
	SettingMaxRestarts      = "max-restarts"
	SettingJoinTimeout      = "join-timeout"
	SettingLastCallTimeout  = "last-call-timeout"
	SettingHeartbeatTimeout = "heartbeat-timeout"
	SettingDisconnectGrace  = "disconnect-grace"
	SettingHangTimeout      = "hang-timeout"
	SettingHangDetection    = "hang-detection"
)

// FlagRef names a setting as a flag in a message: "--node-unit=0". It is the
// ref of a command whose flags are named like the settings (`rover master`).
func FlagRef(setting, value string) string { return "--" + setting + "=" + value }

// ValueError names the flag whose value could not be read: "--nnodes=2x:
// want N or MIN:MAX, e.g. 2 or 1:4", one line per problem of err.
func ValueError(flag, raw string, err error) error {
	return errors.Join(valueErrors(flag, raw, "", err)...)
}

// NNodesText is --nnodes in its own syntax: "N" or "MIN:MAX".
func (p Policy) NNodesText() string {
	if p.MinNodes == p.MaxNodes {
		return strconv.Itoa(p.MinNodes)
	}
	return strconv.Itoa(p.MinNodes) + ":" + strconv.Itoa(p.MaxNodes)
}

// Check returns every problem of p, or nil. Each message names its setting
// with ref(setting, value), where setting is one of the Setting constants and
// value the setting's text, so that each command names its own flag.
//
// Timeouts travel to the master in whole milliseconds: a positive one below
// a millisecond would arrive as zero, so it is refused here.
func (p Policy) Check(ref func(setting, value string) string) []error {
	var errs []error
	add := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf(format, a...))
	}
	nnodes := ref(SettingNNodes, p.NNodesText())
	if p.MinNodes < 1 {
		add("%s: the minimum number of nodes must be at least 1, not %d", nnodes, p.MinNodes)
	}
	if p.MaxNodes > MaxNodes {
		add("%s: at most %d nodes; lower the maximum", nnodes, MaxNodes)
	}
	if p.MinNodes > p.MaxNodes {
		add("%s: minimum %d is greater than maximum %d; write --nnodes=MIN:MAX with MIN <= MAX", nnodes, p.MinNodes, p.MaxNodes)
	}
	if p.MaxRestarts < 0 || p.MaxRestarts > MaxRestarts {
		add("%s: must be 0 to %d", ref(SettingMaxRestarts, strconv.Itoa(p.MaxRestarts)), MaxRestarts)
	}
	if p.HangDetection < 0 || p.HangDetection > 2 {
		add("%s: want 0 (log a hang), 1 (also warn) or 2 (also restart the workers)", ref(SettingHangDetection, strconv.Itoa(p.HangDetection)))
	}
	nodeUnit := ref(SettingNodeUnit, strconv.Itoa(p.NodeUnit))
	switch {
	case p.NodeUnit < 1:
		add("%s: must be at least 1", nodeUnit)
	case p.MaxNodes >= 1 && p.NodeUnit > p.MaxNodes:
		add("%s is more than the maximum of %d nodes (%s); lower --node-unit or raise --nnodes", nodeUnit, p.MaxNodes, nnodes)
	case p.MinNodes >= 1 && p.MinNodes <= p.MaxNodes && p.MaxNodes/p.NodeUnit*p.NodeUnit < p.MinNodes:
		add("%s: no multiple of %d nodes lies within %s, so no world could form; change --node-unit or --nnodes",
			nodeUnit, p.NodeUnit, nnodes)
	}
	for _, t := range []struct {
		setting string
		d       time.Duration
		zeroOK  bool
	}{
		{SettingJoinTimeout, p.JoinTimeout, false},
		{SettingLastCallTimeout, p.LastCallTimeout, false},
		{SettingHeartbeatTimeout, p.HeartbeatTimeout, false},
		{SettingDisconnectGrace, p.DisconnectGrace, true},
		{SettingHangTimeout, p.HangTimeout, true},
	} {
		if err := CheckDuration(ref(t.setting, t.d.String()), t.d, t.zeroOK); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
