package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/roverml/rover/internal/proc"
)

// prefixTemplateEnv names the environment variable that, as in torchrun,
// replaces the "[<role><local rank>]:" prefix of teed console lines.
const prefixTemplateEnv = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"

// linePrefix is the prefix of a worker's teed console lines: torchrun's
// "[<role><local rank>]:", or template with ${role_name}, ${rank} and
// ${local_rank} substituted when template is not empty.
func linePrefix(template, role string, rank, localRank int) string {
	if template == "" {
		return "[" + role + strconv.Itoa(localRank) + "]:"
	}
	return safeSubstitute(template, map[string]string{
		"role_name":  role,
		"rank":       strconv.Itoa(rank),
		"local_rank": strconv.Itoa(localRank),
	})
}

// safeSubstitute is Python's string.Template(s).safe_substitute(vars), the
// function torchrun applies to the prefix template: "$$" is "$", "$name"
// and "${name}" are replaced when name is in vars, and everything else,
// unknown names and stray "$" included, is kept as written. Names are
// ASCII letters, digits and "_", not starting with a digit.
func safeSubstitute(s string, vars map[string]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i:] // starts with "$"
		switch {
		case strings.HasPrefix(s, "$$"):
			b.WriteByte('$')
			s = s[2:]
		case strings.HasPrefix(s, "${"):
			name := identifier(s[2:])
			if name != "" && strings.HasPrefix(s[2+len(name):], "}") {
				if v, ok := vars[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[:3+len(name)])
				}
				s = s[3+len(name):]
				continue
			}
			b.WriteByte('$')
			s = s[1:]
		default:
			name := identifier(s[1:])
			if v, ok := vars[name]; ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[:1+len(name)])
			}
			s = s[1+len(name):]
		}
	}
}

// identifier returns the longest Python-template identifier s starts with.
func identifier(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return s[:i]
		}
	}
	return s
}

// errorFileEnv is the environment variable naming the error file of a
// worker or, set for the agent itself, the agent's (torchrun's contract
// with schedulers).
const errorFileEnv = "TORCHELASTIC_ERROR_FILE"

// writeRootCause writes the job's root cause to the agent's own error
// file, if it has one, as torchrun does: the root cause's error file when
// the worker ran on this node (with "errorCode" set), else the same layout
// from the failure report.
func (a *agent) writeRootCause(root proc.Failure) {
	path := a.opts.Getenv(errorFileEnv)
	if path == "" {
		return
	}
	a.wroteErrorFile = true
	if nodeRank, _ := a.joined.get(); root.Node != nodeRank {
		root.ErrorFile = "" // a path on another node
	}
	if err := proc.WriteRootCauseFile(path, root); err != nil {
		a.log.Warn("could not write the agent's error file ("+errorFileEnv+")", "err", err)
	}
}

// writeAgentError writes why the agent failed to its own error file, if it
// has one and nothing is written there yet, as torch's record_exception
// does for torchrun: a signal as "SignalException: Process <pid> got
// signal: <N>".
func (a *agent) writeAgentError(err error) {
	path := a.opts.Getenv(errorFileEnv)
	if err == nil || path == "" || a.wroteErrorFile {
		return
	}
	msg := "RoverAgentError: " + err.Error()
	var sc SignalCause
	if errors.As(err, &sc) {
		msg = fmt.Sprintf("SignalException: Process %d got signal: %d", os.Getpid(), int(sc.Signal()))
	}
	if werr := proc.WriteExceptionFile(path, msg, "", time.Now()); werr != nil {
		a.log.Warn("could not write the agent's error file ("+errorFileEnv+")", "err", werr)
	}
}
