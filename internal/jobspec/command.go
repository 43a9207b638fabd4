package jobspec

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// launcherLine is a launcher found in a command: its name as written and
// its arguments (what "rover run" takes). For a launcher inside a shell
// line, shell is how the line runs and words are the arguments as lexed.
type launcherLine struct {
	name  string
	args  []string
	words []shellWord
	shell *ShellLine
}

// findLauncher looks for a launcher in argv, directly or inside a shell
// line ("bash -c LINE"). It returns nil when argv runs something else. A
// line that is the launcher alone, with nothing for a shell to do, is run
// as the launcher directly; any other line with a launcher (cd, &&,
// variables, ...) runs through the shell, and shell says how.
func findLauncher(argv []string, vars shellVars) (*launcherLine, error) {
	if l := launcherOf(argv); l != nil {
		return l, nil
	}
	if len(argv) < 3 || !isShell(argv[0]) || !shellCFlag.MatchString(argv[1]) {
		return nil, nil
	}
	line := argv[2]
	toks, err := lexShell(line, vars)
	if err != nil {
		if mentionsLauncher(line) {
			return nil, fmt.Errorf("the shell line %q cannot be read: %v; fix its quoting", line, err)
		}
		return nil, nil
	}
	found, words, sl, err := shellLauncher(line, toks)
	if err != nil || found == nil {
		return nil, err
	}
	found.args = make([]string, len(words))
	plain := len(argv) == 3 && len(toks) == len(words)+len(strings.Fields(found.name))
	for i, w := range toks {
		if w.op != "" || len(w.unknown) > 0 || strings.ContainsAny(line[w.start:w.end], "*?[~$`") {
			plain = false
		}
		if i < len(words) {
			found.args[i] = words[i].value
		}
	}
	if plain {
		return found, nil
	}
	sl.Argv, sl.Rest = slices.Clone(argv[:2]), slices.Clone(argv[3:])
	found.words, found.shell = words, sl
	return found, nil
}

// shellCFlag matches "-c" and combined forms such as "-lc", "-ec".
var shellCFlag = regexp.MustCompile(`^-[a-z]*c$`)

func isShell(prog string) bool {
	switch path.Base(prog) {
	case "bash", "sh", "dash", "zsh":
		return true
	}
	return false
}

// launcherOf recognises a launcher at the start of argv.
func launcherOf(argv []string) *launcherLine {
	if len(argv) == 0 {
		return nil
	}
	prog := path.Base(argv[0])
	switch {
	case prog == "dlrover-run" || prog == "torchrun":
		return &launcherLine{name: prog, args: argv[1:]}
	case prog == "rover" && len(argv) > 1 && argv[1] == "run":
		return &launcherLine{name: "rover run", args: argv[2:]}
	case pythonProg.MatchString(prog) && len(argv) > 2 && argv[1] == "-m" && argv[2] == "torch.distributed.run":
		return &launcherLine{name: "python -m torch.distributed.run", args: argv[3:]}
	}
	return nil
}

var pythonProg = regexp.MustCompile(`^python[0-9.]*$`)

// mentionsLauncher reports whether a shell line seems to run a launcher.
func mentionsLauncher(line string) bool {
	for _, w := range strings.FieldsFunc(line, func(r rune) bool {
		return strings.ContainsRune(" \t\n;&|()<>`'\"", r)
	}) {
		if b := path.Base(w); b == "dlrover-run" || b == "torchrun" || w == "torch.distributed.run" || b == "rover" {
			return true
		}
	}
	return false
}
