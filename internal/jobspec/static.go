package jobspec

import (
	"fmt"
	"strconv"
	"strings"
)

// lineVars are the variables a shell line's launcher flags may use that
// are known before the job runs: the group's env (the job's envs and the
// container's values) and the node counts Rover gives every node
// (NODE_NUM and WORKER_NUM: the group's most nodes, which is replicas when
// the launcher's --nnodes is read from them).
func lineVars(g *ReplicaGroup, w *wireReplica) shellVars {
	nodes := strconv.Itoa(cmpOr(w.Replicas, w.MaxReplicas, 1))
	return func(name string) (string, bool) {
		for i := len(g.Env) - 1; i >= 0; i-- {
			if g.Env[i].Name == name {
				return g.Env[i].Value, true
			}
		}
		switch name {
		case "NODE_NUM", "WORKER_NUM":
			return nodes, true
		}
		return "", false
	}
}

func cmpOr(ps ...any) int {
	for _, p := range ps {
		switch p := p.(type) {
		case *int:
			if p != nil {
				return *p
			}
		case int:
			return p
		}
	}
	return 0
}

// staticArgs reads a shell line's launcher arguments as far as they are
// known before the job runs. A flag whose value is not known (a variable
// that differs per node, or that the template's env does not set) is left
// out of what the plan reads, with a note: the shell still passes it to
// the launcher on every node. Without a readable --nnodes the group's
// replicas stand in. The script must be known: it is what the job runs.
func staticArgs(l *launcherLine, nodes int, cmdPath string) (args, notes []string, err error) {
	words := l.words
	dropped := func(what string, w []shellWord, why []string) {
		notes = append(notes, fmt.Sprintf("%s: %s %s depends on %s, not known before the job runs (%s): the plan does not read it; the shell passes it to the launcher on each node",
			cmdPath, l.name, what, strings.Join(why, ", "), whyUnknown(why)))
	}
	nnodes := false
	i := 0
	for ; i < len(words); i++ {
		w := words[i]
		if w.value == "--" || !strings.HasPrefix(w.value, "-") {
			break
		}
		name, _, hasVal := strings.Cut(strings.TrimLeft(w.value, "-"), "=")
		name = strings.ReplaceAll(name, "_", "-")
		value := []shellWord{w}
		if !hasVal && strings.HasPrefix(w.value, "--") && i+1 < len(words) && !strings.HasPrefix(words[i+1].value, "-") && takesValue(name) {
			value = append(value, words[i+1])
			i++
		}
		var why []string
		for _, v := range value {
			why = append(why, v.unknown...)
		}
		if len(why) > 0 {
			text := value[0].value
			if len(value) > 1 {
				text += " " + value[1].value
			}
			dropped(text, value, why)
			continue
		}
		if name == "nnodes" || strings.HasPrefix("nnodes", name) && len(name) > 1 {
			nnodes = true
		}
		for _, v := range value {
			args = append(args, v.value)
		}
	}
	if i < len(words) && words[i].value != "--" && len(words[i].unknown) > 0 {
		return nil, nil, fmt.Errorf("%s: the script %q depends on %s, not known before the job runs; name the script in the line", l.name, words[i].value, strings.Join(words[i].unknown, ", "))
	}
	if !nnodes {
		args = append([]string{"--nnodes=" + strconv.Itoa(nodes)}, args...)
		if len(notes) > 0 {
			notes = append(notes, fmt.Sprintf("%s: the plan reads --nnodes=%d, from replicas", cmdPath, nodes))
		}
	}
	for ; i < len(words); i++ {
		args = append(args, words[i].value)
	}
	return args, notes, nil
}

func whyUnknown(vars []string) string {
	for _, v := range vars {
		if !perNode(strings.TrimPrefix(v, "$")) {
			if strings.HasPrefix(v, "$") && len(v) > 2 && v[1] != '(' {
				return "set it in the container's env or spec.envs to have it read"
			}
			return "the shell computes it"
		}
	}
	return "it differs per node"
}
