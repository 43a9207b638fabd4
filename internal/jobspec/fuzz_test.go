package jobspec

import (
	"os"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/torch-mnist.yaml", "testdata/local.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("replicaSpecs: {worker: {template: {spec: {containers: [{command: [bash, -c, 'torchrun --nnodes=2 t.py']}]}}}}"))
	f.Add([]byte("envs: {A: {name: A, value: 1}}\nresourceLimits: {cpu: 1e3}"))
	f.Add([]byte("replicaSpecs: {worker: {replicas: 2, template: {spec: {volumes: [{name: v, emptyDir: {}}], containers: [{command: [bash, -c, \"cd x && N=${A:-1} dlrover-run --nnodes=$NODE_NUM t.py | tee l\"]}]}}}}\nx: &a [1]\ny: [*a, *a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := Parse(data)
		if err != nil {
			return
		}
		if spec.Replicas[Worker] == nil {
			t.Fatal("a parsed spec has no worker group")
		}
		_ = spec.Check(LocalCapabilities)
	})
}
