package runconfig

import (
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	const ep = "--rdzv-endpoint=m"
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		gpus    int
		want    []string // substrings that must all appear
		notWant []string // substrings that must not appear
	}{
		{name: "collective timing mode", args: []string{"train.py"}, env: map[string]string{"ROVER_COLLECTIVE_TIMING": "on"},
			want: []string{`ROVER_COLLECTIVE_TIMING="on": want 0 (collective timing off), 1 (the default`, "or always"}},
		{name: "a flag of rover submit", args: []string{"--auto-scale", "train.py"},
			want: []string{"--auto-scale is rover submit's, not rover run's", "rover submit --auto-scale"}},
		{name: "unknown flag", args: []string{"--foo", "train.py"},
			want: []string{`unknown flag --foo (see "rover run --help")`}, notWant: []string{"did you mean"}},
		{name: "unknown flag with value", args: []string{"--foo=1", "x.py"},
			want: []string{`unknown flag --foo (see "rover run --help")`}, notWant: []string{"not found"}},
		{name: "suggestion", args: []string{"--nprocs-per-node=2", "train.py"},
			want: []string{"unknown flag --nprocs-per-node", "did you mean --nproc-per-node?"}},
		{name: "suggestion underscore", args: []string{"--nprocs_per_node", "2", "train.py"},
			want: []string{"did you mean --nproc-per-node?"}},
		{name: "suggestion swap", args: []string{"--rdzv-endpiont", "m", "train.py"},
			want: []string{"did you mean --rdzv-endpoint?"}},
		{name: "suggestion typo", args: []string{"--standlone", "train.py"},
			want: []string{"did you mean --standalone?"}},
		{name: "suggestion upper case", args: []string{"--NNODES=2", "train.py"},
			want: []string{"did you mean --nnodes?"}},
		{name: "single dash long flag", args: []string{"-nnodes", "2", "train.py"},
			want: []string{"unknown flag -nnodes", "did you mean --nnodes?"}},
		{name: "every unknown flag", args: []string{"--foo", "--bar", "train.py"},
			want: []string{"unknown flag --foo", "unknown flag --bar"}},
		{name: "unknown short flag", args: []string{"-x", "train.py"}, want: []string{"unknown flag -x"}},
		{name: "ambiguous prefix", args: []string{"--master", "x", "train.py"},
			want: []string{"ambiguous flag --master could mean --master-addr or --master-port"}},
		{name: "short boolean with attached text", args: []string{"-mpkg.train"},
			want: []string{"-m takes no value", "-m pkg.train"}},
		{name: "missing value at end", args: []string{"--nnodes"}, want: []string{"--nnodes needs a value: --nnodes N|MIN:MAX"}},
		{name: "missing value before a flag", args: []string{"--rdzv-endpoint", "--standalone", "train.py"},
			want: []string{"--rdzv-endpoint needs a value"}},
		{name: "bad boolean", args: []string{"--standalone=maybe", "train.py"},
			want: []string{"--standalone=maybe: want true or false"}},
		{name: "nnodes min greater than max", args: []string{"--nnodes=3:2", ep, "train.py"},
			want: []string{"--nnodes=3:2: minimum 3 is greater than maximum 2"}},
		{name: "nnodes zero", args: []string{"--nnodes=0", "train.py"}, want: []string{"--nnodes=0: the minimum number of nodes must be at least 1"}},
		{name: "nnodes syntax", args: []string{"--nnodes", "abc", "train.py"}, want: []string{"--nnodes=abc: want N or MIN:MAX"}},
		{name: "nnodes three parts", args: []string{"--nnodes", "1:2:3", "train.py"}, want: []string{"--nnodes=1:2:3: want N or MIN:MAX"}},
		{name: "nproc zero", args: []string{"--nproc-per-node=0", "train.py"}, want: []string{"--nproc-per-node=0: want 1 to 4096 worker processes per node"}},
		{name: "nproc gpu without gpus", args: []string{"--nproc-per-node=gpu", "train.py"},
			want: []string{"--nproc-per-node=gpu: no NVIDIA GPUs found"}},
		{name: "nproc word", args: []string{"--nproc-per-node=many", "train.py"},
			want: []string{"--nproc-per-node=many: want a number of worker processes, or auto, gpu or cpu"}},
		{name: "max restarts negative", args: []string{"--max-restarts=-1", "train.py"}, want: []string{"--max-restarts=-1: must be 0 to 1048576"}},
		{name: "max restarts word", args: []string{"--max-restarts=x", "train.py"}, want: []string{"--max-restarts=x: want a whole number"}},
		{name: "node unit zero", args: []string{"--node-unit=0", "train.py"}, want: []string{"--node-unit=0: must be at least 1"}},
		{name: "node unit above max nodes", args: []string{"--node-unit=3", "--nnodes=1:2", ep, "train.py"},
			want: []string{"--node-unit=3 is more than the maximum of 2 nodes (--nnodes=1:2)"}},
		{name: "node rank out of range", args: []string{"--node-rank=2", "--nnodes=2", ep, "train.py"},
			want: []string{"--node-rank=2 is out of range: use 0 to 1"}},
		{name: "node rank below -1", args: []string{"--node-rank=-2", "train.py"}, want: []string{"--node-rank=-2 is out of range"}},
		{name: "monitor interval zero", args: []string{"--monitor-interval=0", "train.py"}, want: []string{"--monitor-interval=0s: must be positive"}},
		{name: "monitor interval word", args: []string{"--monitor-interval=soon", "train.py"},
			want: []string{"--monitor-interval=soon: want seconds (e.g. 30 or 0.5) or a duration"}},
		{name: "monitor interval nan", args: []string{"--monitor-interval=NaN", "train.py"}, want: []string{"want a finite number of seconds"}},
		{name: "redirects out of range", args: []string{"--redirects=4", "train.py"}, want: []string{"--redirects=4: value 4 out of range; use 0 (none)"}},
		{name: "tee per rank out of range", args: []string{"-t", "0:5,1:-1", "train.py"}, want: []string{"--tee=0:5,1:-1: value 5, -1 out of range"}},
		{name: "redirects negative rank", args: []string{"-r=-1:2", "train.py"}, want: []string{"--redirects=-1:2: local rank -1 is negative"}},
		{name: "value that looks like a flag", args: []string{"-r", "-1:2", "train.py"}, want: []string{"-r needs a value: -r SPEC"}},
		{name: "redirects syntax", args: []string{"-r", "x", "train.py"}, want: []string{"--redirects=x: want 0 (none), 1 (stdout)"}},
		{name: "redirects pair syntax", args: []string{"-r", "0:1,2", "train.py"}, want: []string{`--redirects=0:1,2: bad pair "2"`}},
		{name: "local ranks filter out of range", args: []string{"--local-ranks-filter=0,4", "--nproc-per-node=2", "train.py"},
			want: []string{"--local-ranks-filter: local rank 4 is out of range: --nproc-per-node=2 gives local ranks 0 to 1"}},
		{name: "local ranks filter syntax", args: []string{"--local-ranks-filter=a", "train.py"}, want: []string{`"a" is not a local rank`}},
		{name: "master port zero", args: []string{"--master-port=0", "train.py"}, want: []string{"--master-port: port 0 is out of range; use 1 to 65535"}},
		{name: "master port too big", args: []string{"--master-port=70000", "train.py"}, want: []string{"port 70000 is out of range"}},
		{name: "training port", args: []string{"--training-port=65536", "train.py"}, want: []string{"--training-port: port 65536 is out of range"}},
		{name: "endpoint port out of range", args: []string{"--rdzv-endpoint=h:70000", "train.py"},
			want: []string{"--rdzv-endpoint=h:70000: port 70000 is out of range"}},
		{name: "endpoint port word", args: []string{"--rdzv-endpoint=h:abc", "train.py"},
			want: []string{`--rdzv-endpoint=h:abc: port "abc" is not a port number`}},
		{name: "endpoint bare ipv6", args: []string{"--rdzv-endpoint=::1", "train.py"},
			want: []string{"put IPv6 addresses in brackets: [::1]:29400"}},
		{name: "metrics address port out of range", args: []string{"--metrics-addr=:70000", "train.py"},
			want: []string{`--metrics-addr=:70000: port "70000" of ":70000" is not a number from 0 (pick one) to 65535`}},
		{name: "metrics address without a port", args: []string{"--metrics-addr=0.0.0.0", "train.py"},
			want: []string{`--metrics-addr=0.0.0.0: "0.0.0.0" is not HOST:PORT`}},
		{name: "metrics address file alone", args: []string{"--metrics-addr-file=m.addr", "train.py"},
			want: []string{"--metrics-addr-file=m.addr takes effect only with --metrics-addr: give the address to serve the metrics on, or "}},
		{name: "endpoint url", args: []string{"--rdzv-endpoint=http://m:1", "train.py"}, want: []string{"not a URL"}},
		{name: "endpoint unclosed bracket", args: []string{"--rdzv-endpoint=[::1", "train.py"}, want: []string{"missing ]"}},
		{name: "endpoint empty port", args: []string{"--rdzv-endpoint=m:", "train.py"}, want: []string{"empty port"}},
		{name: "endpoint no host", args: []string{"--rdzv-endpoint=:5", "train.py"}, want: []string{"missing host"}},
		{name: "endpoint bad host", args: []string{"--rdzv-endpoint=a b", "train.py"}, want: []string{`host "a b" has characters`}},
		{name: "no script", args: nil, want: []string{"no training script given: usage: rover run [options] SCRIPT [ARGS...]"}},
		{name: "no script after double dash", args: []string{"--nnodes=1", "--"}, want: []string{"no training script given"}},
		{name: "script not found", args: []string{"x.py"}, want: []string{`training script "x.py" not found`}},
		{name: "run path script not found", args: []string{"--run-path", "x.py"}, want: []string{`training script "x.py" not found`}},
		{name: "no python with module", args: []string{"--no-python", "-m", "x"},
			want: []string{"--no-python and -m/--module cannot be used together"}, notWant: []string{"not found"}},
		{name: "multi node without endpoint", args: []string{"--nnodes=1:2", "train.py"},
			want: []string{`--nnodes=1:2 needs --rdzv-endpoint HOST:PORT (a "rover master", or the host of node rank 0`,
				"or --rdzv-backend=static with --node-rank and --master-addr"}},
		{name: "static without a node rank", args: []string{"--nnodes=2", "--rdzv-backend=static", "--master-addr=h", "train.py"},
			want: []string{"--rdzv-backend=static needs --node-rank (PET_NODE_RANK, NODE_RANK): this node's rank, 0 to 1"}},
		{name: "static with a range of nodes", args: []string{"--nnodes=1:2", "--rdzv-backend=static", "--node-rank=0", "train.py"},
			want: []string{"--rdzv-backend=static needs a fixed number of nodes, not --nnodes=1:2"}},
		{name: "static with the last port", args: []string{"--nnodes=2", "--rdzv-backend=static", "--node-rank=0", "--master-port=65535", "train.py"},
			want: []string{"listens on --master-port + 1, which is past 65535"}},
		{name: "bad MASTER_ADDR", args: []string{"--nnodes=2", "train.py"}, env: map[string]string{"MASTER_ADDR": "a b", "MASTER_PORT": "1"},
			want: []string{"MASTER_ADDR=a b and MASTER_PORT=1 (the endpoint of a job without --rdzv-endpoint)"}},
		{name: "standalone with many nodes", args: []string{"--standalone", "--nnodes=2", "train.py"},
			want: []string{"--standalone runs a single node, but --nnodes=2 allows 2"}, notWant: []string{"needs --rdzv-endpoint"}},
		{name: "TLS server name without a CA", args: []string{"--nnodes=2", ep, "--tls-server-name", "master.example", "train.py"},
			want: []string{"--tls-server-name=master.example needs --tls-ca", "remove the flag"}},
		{name: "TLS CA with the embedded master", args: []string{"--tls-ca", "ca.pem", "train.py"},
			want: []string{"--tls-ca=ca.pem needs a master to reach (--rdzv-endpoint): the embedded master of --standalone serves this node alone, on loopback, without TLS"}},
		{name: "TLS CA from env with the embedded master", args: []string{"--standalone", "train.py"}, env: map[string]string{"ROVER_TLS_CA": "ca.pem"},
			want: []string{"--tls-ca=ca.pem (from ROVER_TLS_CA) needs a master to reach", "unset ROVER_TLS_CA"}},
		{name: "etcd backend", args: []string{"--rdzv-backend=etcd", "train.py"},
			want: []string{"--rdzv-backend=etcd is not supported: Rover's master manages rendezvous; use c10d"}},
		{name: "etcd-v2 backend", args: []string{"--rdzv_backend", "etcd-v2", "train.py"},
			want: []string{"--rdzv-backend=etcd-v2 is not supported: Rover's master manages rendezvous; use c10d"}},
		{name: "unknown backend", args: []string{"--rdzv-backend=zk", "train.py"}, want: []string{"--rdzv-backend=zk is unknown; use c10d"}},
		{name: "empty rdzv id", args: []string{"--rdzv-id=", "train.py"}, want: []string{"--rdzv-id is empty"}},
		{name: "start method", args: []string{"--start-method=thread", "train.py"}, want: []string{"--start-method=thread is unknown; use spawn, fork or forkserver"}},
		{name: "rdzv-conf unknown key", args: []string{"--rdzv-conf=foo=1", "train.py"},
			want: []string{`--rdzv-conf=foo=1: unknown key "foo"; known keys: join_timeout, last_call_timeout, lastcall_timeout`}},
		{name: "rdzv-conf every problem", args: []string{"--rdzv-conf=join_timeout=soon,close_timeout=,=3,bar=1", "train.py"},
			want: []string{"join_timeout=soon: want seconds", "key close_timeout has no value", `item "=3" has no key`, `unknown key "bar"`}},
		{name: "rdzv-conf pend_timeout must be a duration", args: []string{"--rdzv-conf=pend_timeout=x", "train.py"},
			want: []string{"pend_timeout=x: want seconds"}},
		{name: "rdzv-conf negative timeout", args: []string{"--rdzv-conf=join_timeout=-5,disconnect_grace=-1", "train.py"},
			want: []string{"--rdzv-conf join_timeout=-5s: must be positive", "--rdzv-conf disconnect_grace=-1s: must not be negative"}},
		{name: "rdzv-conf timeout below the millisecond", args: []string{"--rdzv-conf=heartbeat_timeout=1ns,disconnect_grace=500us", "train.py"},
			want: []string{"--rdzv-conf heartbeat_timeout=1ns: must be at least 1ms", "--rdzv-conf disconnect_grace=500µs: must be 0 or at least 1ms"}},
		{name: "node unit with no multiple in range", args: []string{"--nnodes=3", "--node-unit=2", ep, "train.py"},
			want: []string{"--node-unit=2: no multiple of 2 nodes lies within --nnodes=3"}},
		{name: "heartbeat interval not below timeout", args: []string{"--heartbeat-interval=10m", "train.py"},
			want: []string{"--heartbeat-interval=10m0s must be at most a third of --rdzv-conf heartbeat_timeout=30s"}},
		{name: "heartbeat interval above a third of the timeout", args: []string{"--heartbeat-interval=11s", "train.py"},
			want: []string{"--heartbeat-interval=11s must be at most a third of --rdzv-conf heartbeat_timeout=30s"}},
		{name: "heartbeat interval zero", args: []string{"--heartbeat-interval=0", "train.py"}, want: []string{"--heartbeat-interval=0s: must be positive"}},
		{name: "stop grace negative", args: []string{"--stop-grace-period=-1s", "train.py"}, want: []string{"--stop-grace-period=-1s: must not be negative"}},
		{name: "precheck out of range", args: []string{"--precheck", "3", "train.py"}, want: []string{"--precheck=3: want 0 (no check), 1 (the node check) or 2"}},
		{name: "unknown accelerator", args: []string{"--accelerator=tpu", "train.py"}, want: []string{"--accelerator=tpu is unknown; use one of nvidia.com/gpu, ascend-npu"}},
		{name: "unknown membind policy", args: []string{"--membind_policy=strict", "train.py"}, want: []string{"--membind-policy=strict is unknown; use bind or preferred"}},
		{name: "hang downtime zero", args: []string{"--hang_downtime=0", "train.py"}, want: []string{"--hang-downtime=0: want whole minutes from 1 to 43200"}},
		{name: "hang downtime not a number", args: []string{"--hang_downtime=5m", "train.py"}, want: []string{"--hang-downtime=5m: want a whole number"}},
		{name: "auto config with a bad NODE_NUM", args: []string{"--auto-config", "train.py"}, env: map[string]string{"NODE_NUM": "four"},
			want: []string{"NODE_NUM=four (read by --auto-config): want a whole number of nodes"}},
		{name: "out of range from env names the variable", args: []string{"train.py"}, env: map[string]string{"PET_PRECHECK": "7"},
			want: []string{"--precheck=7 (from PET_PRECHECK): want 0"}},
		{name: "logs specs", args: []string{"--logs-specs=custom", "train.py"}, want: []string{`--logs-specs=custom is unknown: Rover accepts only torchrun's registered name "default"`, "remove the flag"}},
		{name: "bad env value", args: []string{"train.py"}, env: map[string]string{"PET_NNODES": "abc"},
			want: []string{"PET_NNODES=abc (default for --nnodes): want N or MIN:MAX"}},
		{name: "env value out of range", args: []string{"train.py"}, env: map[string]string{"PET_NNODES": "3:2", "ROVER_MASTER_ADDR": "m"},
			want: []string{"--nnodes=3:2 (from PET_NNODES): minimum 3 is greater than maximum 2"}},
		{name: "all problems at once", args: []string{"--nnodes=3:2", "--nproc-per-node=0", "--max-restarts=-1", "--precheck=5", "--accelerator=x", "--rdzv-backend=etcd", "x.py"},
			want: []string{"minimum 3 is greater than maximum 2", "--nproc-per-node=0", "--max-restarts=-1", "--precheck=5",
				"--accelerator=x", "--rdzv-backend=etcd", `training script "x.py" not found`}},
		{name: "parse and validation problems together", args: []string{"--nnodes=x", "--nproc-per-node=0"},
			want: []string{"--nnodes=x: want", "--nproc-per-node=0: want 1 to 4096", "no training script given"}, notWant: []string{"--nnodes=0"}},
		{name: "a bad value is reported once", args: []string{"--nproc-per-node=gpu", "--monitor-interval=x", "train.py"},
			want: []string{"no NVIDIA GPUs found", "--monitor-interval=x: want"}, notWant: []string{"--nproc-per-node=0", "--monitor-interval=0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := testParser(tt.env, tt.gpus).Parse(tt.args)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", tt.args, c)
			}
			if c != nil {
				t.Errorf("Parse(%q) returned a Config with an error", tt.args)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Parse(%q) error does not contain %q; got:\n%s", tt.args, w, msg)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("Parse(%q) error contains %q; got:\n%s", tt.args, w, msg)
				}
			}
		})
	}
}
