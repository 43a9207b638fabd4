package runconfig

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error has a message,
// and that a Config it accepts is valid and keeps the script's arguments.
// args and env are newline-separated ("KEY=VALUE" lines for env).
func FuzzParse(f *testing.F) {
	for _, seed := range [][2]string{
		{"train.py", ""},
		{"--nnodes=1:4\n--rdzv-endpoint\n[::1]:5\ntrain.py\n--lr\n1", ""},
		{"--nproc_per_node\nauto\n-r\n0:1,1:2\n-t3\n--\ntrain.py", "PET_NNODES=2\nROVER_MASTER_ADDR=m"},
		{"-m\npkg\n--x", "PET_RDZV_CONF=join_timeout=5,lastcall_timeout=1ms"},
		{"--no-python\n-m\nx", "PET_STANDALONE=1"},
		{"--rdzv-conf=join_timeout=-1,foo=2,=\n--standlone\n--master", ""},
		{"--monitor-interval=1e308\n--heartbeat-interval=NaN\n-mx\n-nnodes", "PET_NPROC_PER_NODE=gpu"},
		{"--local-ranks-filter=3,1\n--node-rank\n-1\n--precheck=2\n-h", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, argText, envText string) {
		var args []string
		if argText != "" {
			args = strings.Split(argText, "\n")
		}
		env := map[string]string{}
		for line := range strings.SplitSeq(envText, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		p := testParser(env, len(argText)%3)
		c, err := p.Parse(args)
		if err != nil {
			if c != nil || err.Error() == "" {
				t.Fatalf("Parse(%q) = %v, %q: want no Config and a message", args, c, err)
			}
			return
		}
		if err := c.validate(p.Stat); err != nil {
			t.Fatalf("Parse(%q) accepted a Config that Validate rejects: %v", args, err)
		}
		argv := c.WorkerArgv("python")
		if !slices.Equal(argv[len(argv)-len(c.Args):], c.Args) || !slices.Equal(c.Args, args[len(args)-len(c.Args):]) {
			t.Fatalf("Parse(%q): script args %q, worker argv %q", args, c.Args, argv)
		}
		if c.Standalone && (c.RdzvEndpoint != "" || c.MaxNodes != 1) {
			t.Fatalf("Parse(%q): standalone with endpoint %q and %d nodes", args, c.RdzvEndpoint, c.MaxNodes)
		}
	})
}
