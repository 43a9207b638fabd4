package runconfig

import (
	"fmt"
	"strings"
	"time"
)

// Bounds on the values of `rover run`, `rover master` and `rover submit`,
// checked when the command line (or job spec) is read so that a value out of
// range is refused up front, naming its flag, instead of by the master later
// in its own terms. They match what the master accepts on the wire
// (docs/security.md, "Limits"); package jobspec checks a job spec's fields
// against the same constants.
const (
	// MaxNodes bounds --nnodes, --node-unit and node ranks: the master's
	// largest world (rendezvous.MaxNodesLimit).
	MaxNodes = 1 << 20
	// MaxNprocPerNode bounds --nproc-per-node: the master's largest local
	// world (rendezvous.MaxLocalWorldSize).
	MaxNprocPerNode = 4096
	// MaxRestarts bounds --max-restarts; restarts travel as 32-bit numbers.
	MaxRestarts = 1 << 20
	// MaxCheckpointKeep bounds --checkpoint-keep.
	MaxCheckpointKeep = 1 << 20
	// MaxDuration bounds every duration flag and --rdzv-conf timeout: the
	// master's largest timeout.
	MaxDuration = 30 * 24 * time.Hour
)

// maxDurationText is MaxDuration as messages show it.
const maxDurationText = "720h (30 days)"

// CheckRange returns an error naming what (a flag and its value, such as
// "--nnodes=2000000") when n is outside lo..hi, or nil.
func CheckRange(what string, n, lo, hi int) error {
	if n < lo || n > hi {
		return fmt.Errorf("%s is out of range: use %d to %d", what, lo, hi)
	}
	return nil
}

// CheckDuration returns an error naming what when d is negative, zero
// (unless zeroOK), below the master's millisecond resolution (unless zero)
// or above MaxDuration; or nil. Every duration flag of `rover run` and
// `rover master` is checked with it.
func CheckDuration(what string, d time.Duration, zeroOK bool) error {
	switch {
	case d < 0 && zeroOK:
		return fmt.Errorf("%s: must not be negative", what)
	case d <= 0 && !zeroOK:
		return fmt.Errorf("%s: must be positive", what)
	case d == 0:
		return nil
	case d < time.Millisecond && zeroOK:
		return fmt.Errorf("%s: must be 0 or at least 1ms: the master keeps whole milliseconds", what)
	case d < time.Millisecond:
		return fmt.Errorf("%s: must be at least 1ms: the master keeps whole milliseconds", what)
	case d > MaxDuration:
		return fmt.Errorf("%s: must be at most %s, the longest duration Rover accepts", what, maxDurationText)
	}
	return nil
}

// CheckEnvVar returns an error naming where (such as `envs[2]` or a flag)
// when name=value cannot be put in a process's environment: an empty name,
// a name with "=", or a NUL byte in either. The kernel refuses such an
// environment when the process is started, so it is refused when the
// job is read instead, where it can name the field.
func CheckEnvVar(where, name, value string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s: the environment variable has no name", where)
	case strings.ContainsAny(name, "=\x00"):
		return fmt.Errorf("%s: environment variable name %q holds %s; a name cannot", where, name, badEnvChar(name))
	case strings.IndexByte(value, 0) >= 0:
		return fmt.Errorf("%s: the value of %s holds a NUL byte, which no process environment can carry; remove it", where, name)
	}
	return nil
}

func badEnvChar(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "a NUL byte"
	}
	return `"="`
}
