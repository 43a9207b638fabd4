package robustness

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// elasticJob is a DLRover ElasticJob of one worker whose container runs
// command (a YAML flow sequence).
func elasticJob(name, replicas, command string) string {
	return `apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata:
  name: ` + name + `
spec:
  distributionStrategy: AllreduceStrategy
  replicaSpecs:
    worker:
      replicas: ` + replicas + `
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              command: ` + command + "\n"
}

// billionLaughs is the classic alias bomb: nine levels of ten aliases.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [\"lol\"]\n")
	for i := 1; i <= 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// worker is a launcher line for rover submit whose one worker says
// "worker-up" and then trains (sleeps) as a child of its bash: a worker
// with a process of its own.
var worker = []string{"--rdzv-id", "{job}", "--nnodes", "1", "--nproc-per-node", "1", "--no-python",
	"bash", "-c", "echo worker-up; sleep 600; echo done"}

func submit(args ...string) []string {
	return append([]string{"submit", "--job-dir", "{dir}/job"}, args...)
}

// killAgent kills the probe's node agent with SIGKILL and waits for the
// worker's own child (sleep 600) to be gone while rover submit still runs.
func killAgent(t *testing.T, tag string) {
	// "worker-up" comes before bash forks its sleep: wait for the child
	// to be there, not for the line.
	var agents, sleeps []int
	waitNone(func() []string {
		agents, sleeps = probeProcs(tag, "rover", "run"), probeProcs(tag, "sleep", "600")
		if len(agents) == 1 && len(sleeps) == 1 {
			return nil
		}
		return []string{"not yet"}
	})
	if len(agents) != 1 || len(sleeps) != 1 {
		t.Fatalf("found agents %v and worker children %v, want one of each", agents, sleeps)
	}
	if err := syscall.Kill(agents[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if left := waitNone(func() []string {
		if slices.Contains(probeProcs(tag, "sleep", "600"), sleeps[0]) {
			return []string{fmt.Sprint(sleeps[0])}
		}
		return nil
	}); len(left) > 0 {
		t.Errorf("the killed agent's worker child %s still runs after %v", left[0], deadline)
	}
}

func TestProbes(t *testing.T) {
	runProbes(t, []probe{
		{name: "malformed YAML", args: submit("{dir}/job.yaml"),
			files: map[string]string{"job.yaml": "apiVersion: elastic.iml.github.io/v1alpha1\nkind: ElasticJob\nspec: [replicaSpecs\n"},
			code:  2, says: "not valid YAML"},
		{name: "deeply nested YAML", args: submit("{dir}/job.yaml"),
			files: map[string]string{"job.yaml": "spec: " + strings.Repeat("[", 200_000) + "\n"},
			code:  2, says: "not valid YAML"},
		{name: "billion laughs", args: submit("{dir}/job.yaml"),
			files: map[string]string{"job.yaml": billionLaughs()},
			code:  2, says: "alias"},
		// A launcher line runs through the shell as the container would:
		// what the job's author wrote runs, but reading the line for the
		// plan (--dry-run) runs nothing, and a value Rover or the template
		// supplies is never evaluated as shell.
		{name: "shell line read for the plan runs nothing", args: submit("--dry-run", "{dir}/job.yaml"),
			files: map[string]string{"job.yaml": elasticJob("{job}", "1",
				`["/bin/bash", "-c", "dlrover-run --nnodes=1 --nproc_per_node=1 --no-python true; touch {dir}/pwned"]`)},
			code: 0, absent: []string{"pwned"}},
		{name: "shell injection through an env value", args: submit("--quiet", "{dir}/job.yaml"),
			files: map[string]string{"job.yaml": strings.Replace(elasticJob("{job}", "1",
				`["/bin/bash", "-c", "dlrover-run --nnodes=1 --nproc_per_node=1 --no-python echo \"$EVIL\""]`),
				"              command:", "              env: [{name: EVIL, value: \"$(touch {dir}/pwned); `touch {dir}/pwned`\"}]\n              command:", 1)},
			code: 0, absent: []string{"pwned"}},
		{name: "wrong token", master: true,
			args:  []string{"status", "--master", "{addr}", "--token-file", "{dir}/wrong.token"},
			files: map[string]string{"wrong.token": "not-the-job-token-but-long-enough-0123456789\n"},
			code:  1, says: "token"},
		{name: "second master on the same state dir", master: true,
			args: []string{"master", "--listen", "127.0.0.1:0", "--token-file", "{dir}/token", "--state-dir", "{dir}/state"},
			code: 1, says: "state"},
		{name: "Ctrl-C of a training job", args: submit(worker...),
			signal: syscall.SIGINT, after: "worker-up", code: 130, says: "stopped"},
		{name: "SIGTERM of a training job", args: submit(worker...),
			signal: syscall.SIGTERM, after: "worker-up", code: 143, says: "stopped"},
		// Its agent gets SIGTERM (its parent-death signal) and stops the
		// worker's whole group: bash and its sleep.
		{name: "SIGKILL of rover submit", args: submit(worker...),
			signal: syscall.SIGKILL, after: "worker-up", code: 137},
		// The agent killed, rover submit alive: the worker's sleep (a
		// child of its bash) goes with the agent, before any stop.
		{name: "SIGKILL of an agent", args: submit(worker...),
			after: "worker-up", during: killAgent, signal: syscall.SIGTERM, code: 143, says: "stopped"},
		{name: "SIGTERM while nodes start", args: submit("--quiet", "--rdzv-id", "{job}", "--nnodes", "12",
			"--nproc-per-node", "1", "--no-python", "bash", "-c", "sleep 600; echo"),
			signal: syscall.SIGTERM, after: "rover submit: job", code: 143, says: "stopped"},
		// Memory must not grow with the replica count before nodes start
		// (it was 2.5 GB for this job): now refused up front.
		{name: "a million replicas", args: submit("--quiet", "{dir}/job.yaml"),
			files: map[string]string{"job.yaml": elasticJob("{job}", "1048576",
				`["/bin/bash", "-c", "dlrover-run --nnodes=1048576 --nproc_per_node=1 --no-python sleep 600"]`)},
			code: 2, says: "spec.replicaSpecs.worker.replicas"},

		{name: "an empty journal", args: []string{"master", "--listen", "127.0.0.1:0", "--state-dir", "{dir}/state"},
			files: map[string]string{"state/journal.db": ""},
			code:  1, says: "--discard-state"},
		{name: "a journal that is not one", args: []string{"master", "--listen", "127.0.0.1:0", "--state-dir", "{dir}/state"},
			files: map[string]string{"state/journal.db": strings.Repeat("not a journal\n", 1000)},
			code:  1, says: "damaged"},
		{name: "token file /dev/zero", args: []string{"status", "--master", "127.0.0.1:1", "--token-file", "/dev/zero"},
			code: 2, says: "16777216 bytes"},
		{name: "TLS CA file /dev/zero", args: []string{"status", "--master", "127.0.0.1:1", "--token-file", "{dir}/t", "--tls-ca", "/dev/zero"},
			files: map[string]string{"t": "a-token-of-enough-length-0123456789\n"},
			code:  2, says: "16777216 bytes"},
		{name: "flags past their bounds", args: []string{"run", "--nnodes", "2000000", "--nproc-per-node", "100000",
			"--hang-timeout", "100000h", "--standalone", "--no-python", "true"},
			code: 2, says: "--hang-timeout=100000h0m0s: must be at most 720h"},
		{name: "replicas: 1e9", args: submit("{dir}/job.yaml"),
			files: map[string]string{"job.yaml": elasticJob("{job}", "1e9",
				`["dlrover-run", "--nnodes=1", "--nproc_per_node=1", "--no-python", "true"]`)},
			code: 2, says: "spec.replicaSpecs.worker.replicas"},
		{name: "a duplicate key", args: submit("{dir}/job.yaml"),
			files: map[string]string{"job.yaml": strings.Replace(elasticJob("{job}", "1",
				`["dlrover-run", "--nnodes=1", "--nproc_per_node=1", "--no-python", "true"]`),
				"      replicas: 1\n", "      replicas: 1\n      replicas: 2\n", 1)},
			code: 2, says: "given twice"},
		{name: "a spec past the size cap", args: submit("{dir}/job.yaml"),
			files: map[string]string{"job.yaml": elasticJob("{job}", "1",
				`["dlrover-run", "--nnodes=1", "--no-python", "true"]`) + "# " + strings.Repeat("x", 3<<20) + "\ntypo: 1\n"},
			code: 2, says: "MiB"},
	})
}
