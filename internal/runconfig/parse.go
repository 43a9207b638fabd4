package runconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
)

// Parser parses "rover run" command lines against a machine described by its
// functions. The zero Parser uses no environment and the real machine.
type Parser struct {
	// Getenv looks up environment variables (PET_*, ROVER_*); nil means an
	// empty environment. An empty value counts as unset.
	Getenv func(string) string
	// CountGPUs returns the number of NVIDIA GPUs for --nproc-per-node
	// auto and gpu; nil counts /dev/nvidia0, /dev/nvidia1, ...
	CountGPUs func() int
	// NumCPU returns the number of CPUs for --nproc-per-node auto and cpu;
	// nil means runtime.NumCPU.
	NumCPU func() int
	// Stat looks up the training script; nil means os.Stat.
	Stat func(string) (fs.FileInfo, error)
	// NUMANodes returns the number of NUMA nodes, for --numa-affinity's
	// note; nil counts /sys/devices/system/node/node*.
	NUMANodes func() int
}

// Parse parses the arguments of "rover run" (without the program name and
// the "run" subcommand) and validates the result; see [Parser.Parse]. getenv
// supplies the PET_* and ROVER_* defaults; pass os.Getenv (nil means none).
func Parse(args []string, getenv func(string) string) (*Config, error) {
	return Parser{Getenv: getenv}.Parse(args)
}

// source ranks where a value came from; a higher source wins.
type source int

const (
	fromDefault source = iota
	fromEnv
	fromCommandLine
)

// Parse parses args and validates the result with Validate. It returns
// ErrHelp when -h or --help is among rover's options, and otherwise either a
// valid Config or an error that lists every problem found (errors.Join).
// Values come from the command line, else from the flag's environment
// variables, else from the built-in default.
func (p Parser) Parse(args []string) (*Config, error) {
	if p.Getenv == nil {
		p.Getenv = func(string) string { return "" }
	}
	if p.CountGPUs == nil {
		p.CountGPUs = countNVIDIAGPUs
	}
	if p.NumCPU == nil {
		p.NumCPU = runtime.NumCPU
	}
	if p.Stat == nil {
		p.Stat = os.Stat
	}
	if p.NUMANodes == nil {
		p.NUMANodes = countNUMANodes
	}

	sc := scan(args)
	if sc.help {
		return nil, ErrHelp
	}
	errs := sc.errs
	if sc.unknown {
		// Without knowing whether an unknown flag takes a value, where the
		// script starts is a guess: report only the command-line problems.
		return nil, errors.Join(errs...)
	}

	c := &Config{}
	setRdzvDefaults(c)
	src := map[string]source{}
	for i := range flags {
		f := &flags[i]
		if f.apply == nil {
			continue
		}
		raw, s, env := f.def, fromDefault, ""
		if v, ok := sc.values[f.name]; ok {
			raw, s = v, fromCommandLine
		} else {
			for _, name := range f.env {
				if v := p.Getenv(name); v != "" {
					raw, s, env = v, fromEnv, name
					break
				}
			}
		}
		src[f.name] = s
		if env != "" {
			if c.origin == nil {
				c.origin = map[string]string{}
			}
			c.origin[f.name] = env
		}
		if err := f.apply(&p, c, raw); err != nil {
			errs = append(errs, valueErrors(f.name, raw, env, err)...)
			// Fall back to the default so that Validate does not report
			// the same flag again.
			_ = f.apply(&p, c, f.def)
		}
	}
	if v, ok := c.RdzvConf["hang_timeout"]; ok && src["hang-timeout"] == fromDefault {
		c.HangTimeout, _ = ParseSeconds(v) // checked by applyRdzvConf
	}
	errs = append(errs, applyDLRover(&p, c, src)...)
	c.MasterAddrSet = src["master-addr"] != fromDefault
	c.MasterPortSet = src["master-port"] != fromDefault
	c.CheckpointKeepSet = src["checkpoint-keep"] != fromDefault
	if err := kubeflowEndpoint(c, src, p.Getenv); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkCollectiveTiming(p.Getenv)...)
	resolveStandalone(c, src)
	ignoreForStandalone(c, src)
	staticWorld(c)

	if len(sc.entry) > 0 {
		c.Entrypoint = sc.entry[0]
		c.Args = append([]string{}, sc.entry[1:]...)
	}
	if err := c.validate(p.Stat); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// resolveStandalone settles --standalone against --rdzv-endpoint and
// --nnodes when they come from different places: a --standalone from the
// environment gives way to a command-line endpoint or --nnodes, and a
// command-line --standalone drops an endpoint from the environment.
// Otherwise --standalone wins over an endpoint, which ignoreForStandalone
// then drops with a warning. Finally, one node without an endpoint implies
// standalone.
func resolveStandalone(c *Config, src map[string]source) {
	if c.Standalone {
		ep, nn, sa := src["rdzv-endpoint"], src["nnodes"], src["standalone"]
		switch {
		case c.RdzvEndpoint != "" && ep > sa, c.MaxNodes > 1 && nn > sa:
			c.Standalone = false
			delete(c.origin, "standalone")
		case c.RdzvEndpoint != "" && sa > ep:
			c.RdzvEndpoint = ""
			delete(c.origin, "rdzv-endpoint")
		}
	}
	if c.MaxNodes == 1 && c.RdzvEndpoint == "" {
		c.Standalone = true
	}
}

// valueErrors names the flag (or environment variable) in each problem of a
// value: "--nnodes=x: want ..." or "PET_NNODES=x (default for --nnodes): ...".
func valueErrors(flag, raw, env string, err error) []error {
	prefix := "--" + flag + "=" + raw
	if env != "" {
		prefix = env + "=" + raw + " (default for --" + flag + ")"
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			errs = append(errs, fmt.Errorf("%s: %w", prefix, e))
		}
		return errs
	}
	return []error{fmt.Errorf("%s: %w", prefix, err)}
}

// scanned is the command line split into rover's options and the script.
type scanned struct {
	values  map[string]string // flag name -> raw value; the last one given wins
	entry   []string          // the script and its arguments
	errs    []error
	unknown bool // an unknown or ambiguous flag was seen
	help    bool
}

// scan splits args the way torchrun's argparse does: options until the first
// non-option argument or "--"; that argument is the script and everything
// after it belongs to the script.
func scan(args []string) scanned {
	sc := scanned{values: map[string]string{}}
	i := 0
	for i < len(args) {
		arg := args[i]
		if arg == "--" {
			i++
			break
		}
		if !isOption(arg) {
			break
		}
		i++
		f, spelled, val, hasVal, err := lookup(arg)
		if err != nil {
			sc.errs = append(sc.errs, err)
			sc.unknown = true
			continue
		}
		if f.name == "help" {
			sc.help = true
			continue
		}
		if f.boolean {
			if !hasVal {
				val = "true"
			}
			sc.values[f.name] = val
			continue
		}
		if !hasVal {
			if i >= len(args) || isOption(args[i]) || args[i] == "--" {
				sc.errs = append(sc.errs, fmt.Errorf("%s needs a value: %s %s", spelled, spelled, f.metavar))
				continue
			}
			val = args[i]
			i++
		}
		sc.values[f.name] = val
	}
	sc.entry = args[i:]
	return sc
}

// isOption reports whether arg is an option rather than the script. As in
// argparse, "-" and negative numbers are not options.
func isOption(arg string) bool {
	return len(arg) >= 2 && arg[0] == '-' && !isNegativeNumber(arg)
}

// isNegativeNumber matches argparse's negative numbers: -5, -.5, -2.5.
func isNegativeNumber(arg string) bool {
	intPart, frac, hasDot := strings.Cut(arg[1:], ".")
	digits := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789") == ""
	}
	if hasDot {
		return (intPart == "" || digits(intPart)) && digits(frac)
	}
	return digits(intPart)
}

// lookup finds the flag an option names. It returns the flag, how to show it
// in messages, and any value attached with "=" (or, for short flags,
// directly: -r3).
func lookup(arg string) (f *flagDef, spelled, val string, hasVal bool, err error) {
	if strings.HasPrefix(arg, "--") {
		name, v, has := strings.Cut(arg[2:], "=")
		f, err := lookupLong("--"+name, name)
		return f, "--" + name, v, has, err
	}
	// Short option: -m, -r VALUE, -rVALUE, -r=VALUE.
	name, rest := arg[1:2], arg[2:]
	if long, _, _ := strings.Cut(arg[1:], "="); len(long) > 1 {
		if f := exactLong(long); f != nil {
			return nil, "", "", false, unknownFlag(arg, "--"+f.name)
		}
	}
	for i := range flags {
		if flags[i].short != name {
			continue
		}
		f, spelled = &flags[i], "-"+name
		if v, ok := strings.CutPrefix(rest, "="); ok {
			return f, spelled, v, true, nil
		}
		if rest == "" {
			return f, spelled, "", false, nil
		}
		if f.boolean {
			return nil, "", "", false, fmt.Errorf("%s: %s takes no value; put what follows it in a separate argument: %s %s", arg, spelled, spelled, rest)
		}
		return f, spelled, rest, true, nil
	}
	return nil, "", "", false, unknownFlag(arg, suggest(arg[1:]))
}

// exactLong finds a long flag by its name in either spelling.
func exactLong(name string) *flagDef {
	norm := strings.ReplaceAll(name, "_", "-")
	for i := range flags {
		if flags[i].name == norm {
			return &flags[i]
		}
	}
	return nil
}

// lookupLong finds a long flag by name, either spelling, or by an
// unambiguous prefix as argparse allows (--nproc for --nproc-per-node).
func lookupLong(spelled, name string) (*flagDef, error) {
	if f := exactLong(name); f != nil {
		return f, nil
	}
	norm := strings.ReplaceAll(name, "_", "-")
	var matches []string
	var found *flagDef
	for i := range flags {
		if norm != "" && strings.HasPrefix(flags[i].name, norm) {
			matches = append(matches, "--"+flags[i].name)
			found = &flags[i]
		}
	}
	switch len(matches) {
	case 0:
		if norm == "auto-scale" || norm == "max-nodes-here" {
			return nil, fmt.Errorf("%s is rover submit's, not rover run's: auto-scaling needs a master that creates the job's nodes; "+
				"run the job with rover submit %s (or as an ElasticJob with autoScale: true on Kubernetes)", spelled, spelled)
		}
		return nil, unknownFlag(spelled, suggest(name))
	case 1:
		return found, nil
	}
	return nil, fmt.Errorf("ambiguous flag %s could mean %s or %s; spell it out (see \"rover run --help\")",
		spelled, strings.Join(matches[:len(matches)-1], ", "), matches[len(matches)-1])
}

// unknownFlag reports an unknown flag, with a suggestion when there is one.
func unknownFlag(spelled, suggestion string) error {
	if suggestion == "" {
		return fmt.Errorf("unknown flag %s (see \"rover run --help\")", spelled)
	}
	return fmt.Errorf("unknown flag %s (see \"rover run --help\"); did you mean %s?", spelled, suggestion)
}

// suggest returns the flag closest to name ("--nproc-per-node"), or "" when
// none is close.
func suggest(name string) string {
	norm := strings.ToLower(strings.ReplaceAll(strings.TrimLeft(name, "-"), "_", "-"))
	if norm == "" {
		return ""
	}
	limit := min(3, max(1, len(norm)/3))
	best, bestDist := "", limit+1
	for _, f := range flags {
		if d := editDistance(norm, f.name); d < bestDist {
			best, bestDist = "--"+f.name, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours each cost 1.
func editDistance(a, b string) int {
	if len(a) > 64 {
		return len(a) // far from any flag; keeps the work bounded
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
