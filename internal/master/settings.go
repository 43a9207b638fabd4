package master

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roverml/rover/internal/jobconfig"
)

// jobSetting is one job-wide setting that an agent brings when it joins. The
// job's value is fixed once, by `rover master --nnodes ...` or by the first
// agent, and every agent that joins later must bring the same: a job whose
// agents disagree on a timeout would act on whichever agent spoke first.
type jobSetting struct {
	// flag names the setting as `rover run` takes it.
	flag string
	// value is the setting's value in c, as the flag writes it.
	value func(c *jobconfig.Config) string
}

// jobSettings lists every job-wide setting of a join request
// (roverv1.RendezvousConfig) but the checkpoint storage, which an agent
// may leave out (checkpointAgrees). settingsAgree compares them all; a
// field added to the request is added here (TestJobSettingsCoverTheRequest
// fails until it is).
var jobSettings = []jobSetting{
	{"--nnodes", func(c *jobconfig.Config) string {
		return strconv.Itoa(c.Rendezvous.MinNodes) + ":" + strconv.Itoa(c.Rendezvous.MaxNodes)
	}},
	{"--node-unit", func(c *jobconfig.Config) string { return strconv.Itoa(max(c.Rendezvous.NodeUnit, 1)) }},
	{"--max-restarts", func(c *jobconfig.Config) string { return strconv.Itoa(c.Rendezvous.MaxRestarts) }},
	{"--rdzv-conf join_timeout", func(c *jobconfig.Config) string { return duration(c.Rendezvous.JoinTimeout) }},
	{"--rdzv-conf last_call_timeout", func(c *jobconfig.Config) string { return duration(c.Rendezvous.LastCall) }},
	{"--rdzv-conf heartbeat_timeout", func(c *jobconfig.Config) string { return duration(c.Nodes.HeartbeatTimeout) }},
	{"--rdzv-conf disconnect_grace", func(c *jobconfig.Config) string { return duration(c.Nodes.DisconnectGrace) }},
	{"--hang-timeout", func(c *jobconfig.Config) string { return duration(c.Hang.Timeout) }},
	{"--hang-detection", func(c *jobconfig.Config) string { return strconv.Itoa(c.Hang.Policy) }},
	{"the node check (--network-check, --exclude-straggler, --comm-perf-test, --precheck)", func(c *jobconfig.Config) string {
		return nodeCheckText(c.NodeCheck)
	}},
}

// duration writes d as the wire carries it: whole milliseconds.
func duration(d time.Duration) string { return d.Truncate(time.Millisecond).String() }

// settingsAgree compares every job-wide setting an agent asks for with the
// job's. It returns nil, or an errConfigMismatch naming each differing
// setting with both values and saying what to do.
func settingsAgree(job, asked *jobconfig.Config) error {
	var errs []error
	for _, s := range jobSettings {
		a, j := s.value(asked), s.value(job)
		switch {
		case a == j:
		case strings.HasPrefix(s.flag, "--"):
			errs = append(errs, fmt.Errorf("%s=%s, but the job runs with %s", s.flag, a, j))
		default:
			errs = append(errs, fmt.Errorf("%s %s, but the job runs with it %s", s.flag, a, j))
		}
	}
	errs = append(errs, checkpointAgrees(job.Checkpoint, asked.Checkpoint)...)
	return mismatch(errs)
}

// mismatch wraps the differences of an agent's settings from the job's in
// errConfigMismatch, with what to do; nil when there are none.
func mismatch(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this agent asks for %w; start every agent of the job with the same settings "+
		"(those of the job's first agent, or of `rover master` when it was started with --nnodes): "+
		"change this agent's, or restart the job with the new ones", errConfigMismatch, errors.Join(errs...))
}

// nodeCheckText describes a node check as jobSettings compares it: every
// field, the ones at their defaults left out.
func nodeCheckText(c *jobconfig.NodeCheck) string {
	s := describeNodeCheck(c)
	if c == nil {
		return s
	}
	if c.StragglerRatio != 0 {
		s += fmt.Sprintf(", straggler ratio %g", c.StragglerRatio)
	}
	if c.GroupTimeout != 0 {
		s += ", group timeout " + duration(c.GroupTimeout)
	}
	return s
}
