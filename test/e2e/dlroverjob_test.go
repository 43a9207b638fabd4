package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dlroverShapedJob is an ElasticJob in the shape DLRover's PyTorch examples take
// (only apiVersion changed, and no image, as it runs on this machine): the
// launcher inside a shell line with cd, && and $NODE_NUM, a /dev/shm
// emptyDir, restartPolicy Always, a security context, resources, a
// sidecar, and the container's workingDir. Each node records the WORKER_ID
// and WORKER_NUM it was given.
func dlroverShapedJob(name, workspace, out string) string {
	return `apiVersion: elastic.rover.dev/v1alpha1
kind: ElasticJob
metadata:
  name: ` + name + `
  namespace: dlrover
spec:
  distributionStrategy: AllreduceStrategy
  optimizeMode: single-job
  replicaSpecs:
    worker:
      replicas: 2
      restartCount: 3
      template:
        spec:
          restartPolicy: Always
          securityContext: {runAsUser: 1000}
          volumes:
            - name: dshm
              emptyDir: {medium: Memory}
          containers:
            - name: main
              imagePullPolicy: IfNotPresent
              workingDir: ` + workspace + `
              env:
                - {name: OUT, value: ` + out + `}
                - name: POD_NAME
                  valueFrom: {fieldRef: {fieldPath: metadata.name}}
              command:
                - /bin/bash
                - -c
                - >-
                  cd code && echo "WORKER_ID=$WORKER_ID WORKER_NUM=$WORKER_NUM" > "$OUT/node-$NODE_RANK.txt" &&
                  dlrover-run --nnodes=$NODE_NUM --nproc_per_node=2 --max_restarts=1 --node_rank=$NODE_RANK
                  --rdzv_conf=` + rdzvConf + ` train.py --steps 20 --ckpt-every 10 --ckpt "$OUT/ckpt.pt" --out "$OUT/out.json"
              resources:
                limits: {cpu: "2", memory: 4Gi}
                requests: {cpu: "2", memory: 4Gi}
              volumeMounts:
                - {name: dshm, mountPath: /dev/shm}
            - name: log-shipper
              command: [sleep, infinity]
`
}

// trainWorkspace makes a directory with code/train.py, the DDP example.
func trainWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", "ddp", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "code"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "code", "train.py"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestSubmitDLRoverJob runs a DLRover-shaped ElasticJob under rover submit
// with real torch: the shell line runs as the container would (cd into the
// code in the workingDir, $NODE_NUM from the node's env), the two nodes
// train DDP to the end, each node gets WORKER_ID and WORKER_NUM, and what
// the local platform ignores is warned about, not refused.
func TestSubmitDLRoverJob(t *testing.T) {
	job := uniqueJob("dlr")
	ws, out := trainWorkspace(t), t.TempDir()
	spec := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(spec, []byte(dlroverShapedJob(job, ws, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	s := submit(t, job, spec)
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0", code)
	}
	res := readResult(t, filepath.Join(out, "out.json"))
	if res.Step != 20 || res.WorldSize != 4 {
		t.Errorf("result: step %d world %d; want 20, 4", res.Step, res.WorldSize)
	}
	for rank, want := range []string{"WORKER_ID=0 WORKER_NUM=2\n", "WORKER_ID=1 WORKER_NUM=2\n"} {
		b, err := os.ReadFile(filepath.Join(out, "node-"+string(rune('0'+rank))+".txt"))
		if err != nil || string(b) != want {
			t.Errorf("node %d recorded %q (%v), want %q", rank, b, err, want)
		}
	}
	errOut := s.stderr.String()
	for _, want := range []string{
		"warning: spec.replicaSpecs.worker.template.spec.restartPolicy: Always is run as Never",
		"warning: spec.replicaSpecs.worker.template.spec.volumes: ignored",
		`warning: spec.replicaSpecs.worker.template.spec.containers[1] (the sidecar container "log-shipper"): ignored`,
		"warning: metadata.namespace: ignored",
		"--node_rank=$NODE_RANK depends on $NODE_RANK",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

// TestSubmitDryRun: --dry-run checks a job and prints its plan without
// running anything (exit 0), or every problem at once (exit 2).
func TestSubmitDryRun(t *testing.T) {
	ws, out := trainWorkspace(t), t.TempDir()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(dlroverShapedJob("dry", ws, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	badDoc := strings.Replace(dlroverShapedJob("dry", ws, out), "      replicas: 2\n", "      replicas: 1e9\n      bogus: 1\n", 1)
	badDoc = strings.Replace(badDoc, "            - name: main\n", "            - name: main\n              image: registry.example/train:1\n", 1)
	if err := os.WriteFile(bad, []byte(badDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "dup.yaml")
	if err := os.WriteFile(dup, []byte(strings.Replace(dlroverShapedJob("dry", ws, out), "      replicas: 2\n", "      replicas: 2\n      replicas: 1e9\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		file string
		code int
		want []string
	}{
		{"valid", good, 0, []string{"job dry: valid; it would run 2 worker processes per node", "each node runs: /bin/sh -c", "cd code && echo", " run --nnodes=$NODE_NUM", "env NODE_NUM=2"}},
		{"duplicate key", dup, 2, []string{`line 12: the key "replicas" is given twice (also at line 11)`}},
		{"every problem at once", bad, 2, []string{
			"spec.replicaSpecs.worker.bogus: unknown field",
			"spec.replicaSpecs.worker.replicas: 1000000000 is above the limit of 10000 nodes per group (MaxNodes)",
			"cannot honour spec.replicaSpecs.worker.template.spec.containers[0].image",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobDir := filepath.Join(t.TempDir(), "job")
			cmd := exec.Command(roverBin, "submit", "--dry-run", "--job-dir", jobDir, tc.file)
			cmd.Env = append(os.Environ(), "PYTHON_EXEC="+pythonExec)
			b, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, b)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("output lacks %q:\n%s", w, b)
				}
			}
			if _, err := os.Stat(jobDir); err == nil {
				t.Error("the job directory was created: something ran")
			}
			if _, err := os.Stat(filepath.Join(out, "node-0.txt")); err == nil {
				t.Error("a node ran")
			}
		})
	}
}
