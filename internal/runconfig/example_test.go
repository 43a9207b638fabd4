package runconfig_test

import (
	"errors"
	"fmt"

	"github.com/roverml/rover/internal/runconfig"
)

func ExampleParse() {
	args := []string{"--nnodes=1:4", "--rdzv_endpoint", "master", "--nproc-per-node=2",
		"--no-python", "./train.sh", "--epochs", "3"}
	env := map[string]string{"PET_MAX_RESTARTS": "3"}
	cfg, err := runconfig.Parse(args, func(k string) string { return env[k] })
	if errors.Is(err, runconfig.ErrHelp) {
		fmt.Print(runconfig.Usage())
		return
	}
	if err != nil {
		fmt.Println("rover run:", err)
		return
	}
	fmt.Println(cfg.MinNodes, cfg.MaxNodes, cfg.RdzvEndpoint, cfg.NprocPerNode, cfg.MaxRestarts)
	fmt.Println(cfg.WorkerArgv("python3"))
	// Output:
	// 1 4 master:29400 2 3
	// [./train.sh --epochs 3]
}

// Parse reports every problem at once, each naming the flag at fault.
func ExampleParse_errors() {
	_, err := runconfig.Parse([]string{"--nnodes=3:2", "--rdzv-endpoint=m", "--nproc-per-node=0",
		"--precheck=3", "--no-python", "prog"}, nil)
	fmt.Println(err)
	_, err = runconfig.Parse([]string{"--nprocs-per-node=2", "train.py"}, nil)
	fmt.Println(err)
	// Output:
	// --nnodes=3:2: minimum 3 is greater than maximum 2; write --nnodes=MIN:MAX with MIN <= MAX
	// --nproc-per-node=0: want 1 to 4096 worker processes per node
	// --precheck=3: want 0 (no check), 1 (the node check) or 2 (the node check with the larger collective)
	// unknown flag --nprocs-per-node (see "rover run --help"); did you mean --nproc-per-node?
}
