package jobspec

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// launcherLine is a launcher found in a command: its name as written and
// its arguments (what "rover run" takes).
type launcherLine struct {
	name string
	args []string
}

// findLauncher looks for a launcher in argv, directly or inside
// "bash -c LINE" / "sh -c LINE". It returns nil when argv runs something
// else, and an error when a shell line mixes a launcher with other shell
// syntax (pipes, &&, redirections, expansions).
func findLauncher(argv []string) (*launcherLine, error) {
	if l := launcherOf(argv); l != nil {
		return l, nil
	}
	if len(argv) < 3 || !isShell(argv[0]) || !shellCFlag.MatchString(argv[1]) {
		return nil, nil
	}
	line := argv[2]
	words, err := splitWords(line)
	if err != nil {
		if mentionsLauncher(line) {
			return nil, fmt.Errorf("the shell line %q runs a launcher inside other shell syntax (%v); Rover reads the launcher's flags only from a single simple command: put the other steps in a script run before training, or in the image", line, err)
		}
		return nil, nil
	}
	l := launcherOf(words)
	if l == nil {
		return nil, nil
	}
	if len(argv) > 3 {
		return nil, fmt.Errorf("arguments after the shell line (%q) are not supported with a launcher; put them in the line", argv[3:])
	}
	return l, nil
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

// splitWords splits a shell line holding one simple command into words,
// applying quotes and backslashes as sh does. Anything that needs a shell
// to run (operators, redirections, expansions, globs, comments) is an
// error naming it.
func splitWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '\n':
			return nil, errors.New("a newline separates commands")
		case c == '\\':
			if i+1 >= len(line) {
				return nil, errors.New("a trailing backslash")
			}
			i++
			if line[i] != '\n' {
				cur.WriteByte(line[i])
				inWord = true
			}
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("an unterminated ' quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				switch line[i] {
				case '$', '`':
					return nil, fmt.Errorf("a shell expansion %q", expansionAt(line, i))
				case '\\':
					if i+1 < len(line) && strings.IndexByte("\"\\$`\n", line[i+1]) >= 0 {
						i++
					}
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, errors.New(`an unterminated " quote`)
			}
		case strings.IndexByte("|&;<>()", c) >= 0:
			op := string(c)
			if i+1 < len(line) && (line[i+1] == c || c == '>' && line[i+1] == '&') {
				op += string(line[i+1])
			}
			return nil, fmt.Errorf("the shell operator %q", op)
		case c == '$' || c == '`':
			return nil, fmt.Errorf("a shell expansion %q", expansionAt(line, i))
		case c == '#' && !inWord:
			return nil, errors.New("a # comment")
		case (c == '*' || c == '?' || c == '[' || c == '~') && !inWord:
			return nil, fmt.Errorf("the shell pattern character %q", string(c))
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, nil
}

// expansionAt returns the expansion starting at line[i], shortened.
func expansionAt(line string, i int) string {
	end := i + 1
	for end < len(line) && end-i < 24 && strings.IndexByte(" \t\"'", line[end]) < 0 {
		end++
	}
	return line[i:end]
}
