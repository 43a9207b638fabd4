package jobspec

import (
	"errors"
	"fmt"
	"strings"
)

// A container's command often runs the launcher through a shell, amid
// other steps ("cd /src && pip install -e . && dlrover-run --nnodes=$NODE_NUM
// train.py"). Rover runs such a line through the shell, as the container
// would, with the launcher word replaced by Rover's; to plan the job it
// reads the launcher's flags from the line statically, expanding the
// variables it knows (the template's env, NODE_NUM, WORKER_NUM). This file
// is the small shell lexer that does that reading: words with quotes and
// known variables applied, and the operators that separate commands.

// shellWord is a word or an operator of a shell line.
type shellWord struct {
	start, end int    // byte range in the line
	value      string // quotes removed, known variables expanded, unknown ones as written
	// unknown names what the word expands that is not known before the
	// job runs: "$NODE_RANK", "$(...)".
	unknown []string
	// op is the operator ("&&", "||", "|", "&", ";", "\n", "(", ")"), or a
	// redirection (">", ">>", "<", ">&", "<&", "&>"); "" for a word.
	op string
}

func (w shellWord) isRedirect() bool { return strings.ContainsAny(w.op, "<>") }

// shellVars answers a variable's value; known is false when it is not
// known before the job runs.
type shellVars func(name string) (value string, known bool)

// lexShell splits line into words and operators. Assignments at the start
// of a command (NAME=value, export NAME=value) with static values become
// known to the rest of the line.
func lexShell(line string, vars shellVars) ([]shellWord, error) {
	l := &lexer{line: line, vars: vars, set: map[string]string{}}
	return l.run()
}

type lexer struct {
	line  string
	vars  shellVars
	set   map[string]string // assignments seen so far
	out   []shellWord
	cur   strings.Builder
	word  *shellWord
	start bool // the next word starts a command
}

func (l *lexer) lookup(name string) (string, bool) {
	if v, ok := l.set[name]; ok {
		return v, true
	}
	return l.vars(name)
}

func (l *lexer) begin(i int) {
	if l.word == nil {
		l.word = &shellWord{start: i}
	}
}

func (l *lexer) flush(i int) {
	if l.word == nil {
		return
	}
	w := *l.word
	w.end, w.value = i, l.cur.String()
	l.cur.Reset()
	l.word = nil
	// NAME=value at a command's start (or after export) assigns.
	if name, val, ok := strings.Cut(w.value, "="); ok && validEnvName(name) && len(w.unknown) == 0 && !strings.ContainsAny(l.line[w.start:w.start+len(name)], `'"\`) {
		if l.start || len(l.out) > 0 && l.out[len(l.out)-1].op == "" && l.out[len(l.out)-1].value == "export" {
			l.set[name] = val
		}
	} else if w.value != "export" {
		l.start = false
	}
	l.out = append(l.out, w)
}

func (l *lexer) op(i, n int, op string) {
	l.flush(i)
	l.out = append(l.out, shellWord{start: i, end: i + n, op: op})
	if !strings.ContainsAny(op, "<>") {
		l.start = true
	}
}

func (l *lexer) run() ([]shellWord, error) {
	s := l.line
	l.start = true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			l.flush(i)
		case c == '\n':
			l.op(i, 1, "\n")
		case c == '#' && l.word == nil:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			i--
		case c == '\\':
			l.begin(i)
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					l.cur.WriteByte(s[i])
				}
			}
		case c == '\'':
			l.begin(i)
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("an unterminated ' quote")
			}
			l.cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			l.begin(i)
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				switch s[i] {
				case '\\':
					if i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
						i++
					}
					l.cur.WriteByte(s[i])
				case '$', '`':
					n, err := l.expand(i)
					if err != nil {
						return nil, err
					}
					i += n - 1
				default:
					l.cur.WriteByte(s[i])
				}
			}
			if i >= len(s) {
				return nil, errors.New(`an unterminated " quote`)
			}
		case c == '$' || c == '`':
			l.begin(i)
			n, err := l.expand(i)
			if err != nil {
				return nil, err
			}
			i += n - 1
		case c == '>' || c == '<':
			// A file descriptor number right before the operator is part
			// of the redirection (2>&1).
			if l.word != nil && l.word.start < i && strings.Trim(s[l.word.start:i], "0123456789") == "" {
				l.word = nil
				l.cur.Reset()
			}
			op := string(c)
			if i+1 < len(s) && (s[i+1] == '>' || s[i+1] == '&') {
				op += string(s[i+1])
			}
			l.op(i, len(op), op)
			i += len(op) - 1
		case c == '&' && i+1 < len(s) && s[i+1] == '>':
			l.op(i, 2, "&>")
			i++
		case c == '&' || c == '|' || c == ';':
			op := string(c)
			if i+1 < len(s) && s[i+1] == c {
				op += op
			}
			l.op(i, len(op), op)
			i += len(op) - 1
		case c == '(' || c == ')':
			l.op(i, 1, string(c))
		default:
			l.begin(i)
			l.cur.WriteByte(c)
		}
	}
	l.flush(len(s))
	return l.out, nil
}

// expand reads the expansion at line[i] ('$' or '`') into the current
// word and returns its length.
func (l *lexer) expand(i int) (int, error) {
	s := l.line
	unknown := func(n int, what string) (int, error) {
		l.word.unknown = append(l.word.unknown, what)
		l.cur.WriteString(s[i : i+n])
		return n, nil
	}
	if s[i] == '`' {
		j := strings.IndexByte(s[i+1:], '`')
		if j < 0 {
			return 0, errors.New("an unterminated ` command substitution")
		}
		return unknown(j+2, "`...`")
	}
	if i+1 >= len(s) {
		l.cur.WriteByte('$')
		return 1, nil
	}
	switch c := s[i+1]; {
	case c == '(':
		depth := 0
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '(':
				depth++
			case ')':
				if depth--; depth == 0 {
					return unknown(j+1-i, "$(...)")
				}
			}
		}
		return 0, errors.New("an unterminated $( command substitution")
	case c == '{':
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return 0, errors.New("an unterminated ${ expansion")
		}
		body := s[i+2 : i+j]
		name, def, hasDef := body, "", false
		if k := strings.IndexAny(body, ":-=+?#%/"); k >= 0 {
			name = body[:k]
			rest := strings.TrimPrefix(body[k:], ":")
			if strings.HasPrefix(rest, "-") {
				def, hasDef = rest[1:], true
			} else {
				return unknown(j+1, "${"+body+"}")
			}
		}
		if v, ok := l.lookup(name); ok && (v != "" || !hasDef) {
			l.cur.WriteString(v)
			return j + 1, nil
		}
		if hasDef && !strings.ContainsAny(def, "$`") {
			if _, known := l.lookup(name); !known && perNode(name) {
				return unknown(j+1, "$"+name)
			}
			l.cur.WriteString(def)
			return j + 1, nil
		}
		return unknown(j+1, "$"+name)
	case c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if v, ok := l.lookup(s[i+1 : j]); ok {
			l.cur.WriteString(v)
			return j - i, nil
		}
		return unknown(j-i, s[i:j])
	case strings.IndexByte("0123456789@*#?$!-", c) >= 0:
		return unknown(2, s[i:i+2])
	}
	l.cur.WriteByte('$')
	return 1, nil
}

// perNodeVars are the variables whose value differs per node: the
// platform sets them when a node starts.
var perNodeVars = []string{"NODE_RANK", "NODE_ID", "WORKER_ID", "WORKER_RANK", "RANK", "POD_NAME", "POD_IP", "NODE_IP",
	"ROVER_NODE_ID", "PET_NODE_RANK", "ROVER_RELAUNCH_COUNT", "HOSTNAME", "MASTER_ADDR", "MASTER_PORT"}

func perNode(name string) bool {
	for _, v := range perNodeVars {
		if v == name {
			return true
		}
	}
	return false
}

// shellReserved are words that start compound commands, skipped when
// looking for a command's program.
var shellReserved = []string{"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "{", "}", "!", "exec", "time", "nohup", "env"}

// shellCommand is one simple command of a line: its words (assignments,
// reserved words and redirections removed).
type shellCommand struct{ words []shellWord }

// shellCommands groups a lexed line into simple commands.
func shellCommands(toks []shellWord) []shellCommand {
	var out []shellCommand
	var cur []shellWord
	lead := true
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.isRedirect():
			if i+1 < len(toks) && toks[i+1].op == "" {
				i++ // the redirection's target
			}
		case t.op != "":
			if len(cur) > 0 {
				out = append(out, shellCommand{cur})
			}
			cur, lead = nil, true
		case lead && (isAssignment(t) || contains(shellReserved, t.value) || t.value == "export"):
		default:
			lead = false
			cur = append(cur, t)
		}
	}
	if len(cur) > 0 {
		out = append(out, shellCommand{cur})
	}
	return out
}

func isAssignment(w shellWord) bool {
	name, _, ok := strings.Cut(w.value, "=")
	return ok && validEnvName(name)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ShellLine is a launcher run inside a shell line: the container's command
// runs through the shell as written, with the launcher's words replaced.
type ShellLine struct {
	// Argv is the container's argv before the line: [/bin/bash, -c].
	Argv []string
	// Before and After are the line's text around the launcher's words
	// ("dlrover-run", "python -m torch.distributed.run").
	Before, After string
	// Rest is the container's argv after the line (the shell's $0, $1...).
	Rest []string
	// Dir is where the line's cd commands before the launcher lead, when
	// they name a directory statically ("" otherwise): where the launcher
	// finds a relative script, from the container's working directory.
	Dir string
}

// Command returns the container's argv with launcher (shell words, such
// as "'/usr/bin/rover' run") in place of the line's launcher.
func (l *ShellLine) Command(launcher string) []string {
	out := append([]string{}, l.Argv...)
	out = append(out, l.Before+launcher+l.After)
	return append(out, l.Rest...)
}

// ShellQuote quotes s as one shell word.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellLauncher finds the launcher in a lexed shell line: the first simple
// command that runs one. words are its arguments; dir is where the cd
// commands before it lead.
func shellLauncher(line string, toks []shellWord) (l *launcherLine, words []shellWord, sl *ShellLine, err error) {
	dir := ""
	for _, c := range shellCommands(toks) {
		vals := make([]string, len(c.words))
		for i, w := range c.words {
			vals[i] = w.value
		}
		if vals[0] == "cd" {
			switch {
			case len(c.words) < 2 || len(c.words[1].unknown) > 0 || vals[1] == "-":
				dir = "\x00" // not known statically
			case strings.HasPrefix(vals[1], "/"):
				dir = vals[1]
			case dir != "\x00":
				dir = strings.TrimPrefix(dir+"/"+vals[1], "/")
			}
			continue
		}
		found := launcherOf(vals)
		if found == nil {
			continue
		}
		for _, w := range c.words[:len(c.words)-len(found.args)] {
			if len(w.unknown) > 0 {
				return nil, nil, nil, fmt.Errorf("the launcher %q is named through %s, which is not known before the job runs; write it out", found.name, strings.Join(w.unknown, ", "))
			}
		}
		n := len(c.words) - len(found.args)
		sl = &ShellLine{Before: line[:c.words[0].start], After: line[c.words[n-1].end:]}
		if dir != "\x00" {
			sl.Dir = dir
		}
		return found, c.words[n:], sl, nil
	}
	return nil, nil, nil, nil
}
