package runconfig

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// groupTitles heads the sections of Usage.
var groupTitles = map[group]string{
	groupGeneral:  "General:",
	groupTorchrun: "torchrun flags:",
	groupDLRover:  "DLRover flags (dlrover-run):",
	groupRover:    "Rover flags:",
}

// Usage returns the help text of "rover run": every flag with its default,
// the environment variables it reads and a one-line description, grouped
// into torchrun's, DLRover's and Rover's own flags, then the --rdzv-conf
// keys.
func Usage() string {
	var b strings.Builder
	b.WriteString(usageLine + "\n")
	b.WriteString("       rover run [options] -m MODULE [ARGS...]\n")
	b.WriteString("       rover run [options] --no-python PROGRAM [ARGS...]\n\n")
	b.WriteString(`Starts the workers of a distributed training job on this node; accepts
torchrun's command line. Options come before SCRIPT; SCRIPT and everything
after it are passed to the workers unchanged ("--" also ends the options).
Long flags may be spelled with dashes or underscores (--nproc-per-node,
--nproc_per_node), shortened to an unambiguous prefix, and given as
--flag=value or --flag value. A flag's default comes from the environment
variable shown, else the built-in default; the command line wins.
`)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	last := group(-1)
	for _, f := range flags {
		if f.group != last {
			last = f.group
			fmt.Fprintf(tw, "\n%s\n", groupTitles[f.group])
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", flagSyntax(f), f.help, defaultNote(f))
	}
	fmt.Fprintf(tw, "\n--rdzv-conf keys (durations: seconds such as 30, or 500ms, 10m):\n")
	for _, k := range rdzvKeys {
		note := ""
		if k.def != "" {
			note = " (default " + k.def + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", k.name, k.help, note)
	}
	tw.Flush()
	return b.String()
}

// flagSyntax shows how a flag is written: "-r, --redirects SPEC".
func flagSyntax(f flagDef) string {
	s := "--" + f.name
	if f.short != "" {
		s = "-" + f.short + ", " + s
	}
	if !f.boolean {
		s += " " + f.metavar
	}
	return s
}

// defaultNote shows a flag's default and environment variables:
// " (default 1:1; env PET_NNODES)".
func defaultNote(f flagDef) string {
	var parts []string
	switch {
	case f.defText != "":
		parts = append(parts, "default "+f.defText)
	case f.def != "" && !f.boolean:
		parts = append(parts, "default "+f.def)
	}
	if len(f.env) > 0 {
		parts = append(parts, "env "+strings.Join(f.env, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}
