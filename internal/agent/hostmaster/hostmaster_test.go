package hostmaster

import (
	"errors"
	"os"
	"testing"

	"github.com/roverml/rover/internal/runconfig/runconfigtest"
)

var (
	envOf = runconfigtest.Env
	parse = runconfigtest.Parse
)

// TestMasterless: which agents host the job's master, or join one.
func TestMasterless(t *testing.T) {
	tests := []struct {
		name                string
		args                []string
		env                 map[string]string
		masterless, mayHost bool
	}{
		{name: "standalone", args: nil},
		{name: "a rover master: token file", args: []string{"--nnodes=2", "--rdzv-endpoint=h:1", "--token-file=t"}, mayHost: true},
		{name: "a rover master: ROVER_TOKEN", args: []string{"--nnodes=2", "--rdzv-endpoint=h:1"},
			env: map[string]string{"ROVER_TOKEN": "0123456789abcdef"}, mayHost: true},
		{name: "no token, no rank: every agent may host", args: []string{"--nnodes=2", "--rdzv-endpoint=h:1"}, masterless: true, mayHost: true},
		{name: "no token, rank 0 hosts", args: []string{"--nnodes=2", "--rdzv-endpoint=h:1", "--node-rank=0"}, masterless: true, mayHost: true},
		{name: "no token, rank 1 joins", args: []string{"--nnodes=2", "--rdzv-endpoint=h:1", "--node-rank=1"}, masterless: true},
		{name: "Kubeflow: rank 1 joins", args: []string{"--nnodes=2"},
			env: map[string]string{"MASTER_ADDR": "h", "NODE_RANK": "1"}, masterless: true},
		{name: "static: rank 0 hosts", args: []string{"--nnodes=2", "--rdzv-backend=static", "--node-rank=0"}, masterless: true, mayHost: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parse(t, tt.env, tt.args...)
			if got := Masterless(cfg, envOf(tt.env)); got != tt.masterless {
				t.Errorf("masterless = %v, want %v", got, tt.masterless)
			}
			if got := Masterless(cfg, envOf(tt.env)) && MayHost(cfg); got != (tt.masterless && tt.mayHost) {
				t.Errorf("hosts = %v, want %v", got, tt.masterless && tt.mayHost)
			}
		})
	}
}

func TestLoopback(t *testing.T) {
	for ep, want := range map[string]bool{
		"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "127.1.2.3:1": true,
		"10.0.0.1:1": false, "node0:1": false, "[fd00::1]:1": false, "bad": false,
	} {
		if got := loopback(ep); got != want {
			t.Errorf("loopback(%q) = %v, want %v", ep, got, want)
		}
	}
}

// TestListenToHost: the first agent to bind the endpoint hosts; a second
// on the same host, and any agent for whom the address is not local, join.
func TestListenToHost(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln2, err := Listen(ln.Addr().String()); err == nil {
		ln2.Close()
		t.Errorf("a second agent bound %s too", ln.Addr())
	}
	if ln3, err := Listen("192.0.2.1:29400"); err == nil { // TEST-NET-1: on no host
		ln3.Close()
		t.Errorf("bound an address that is not this host's")
	} else if errors.Is(err, os.ErrPermission) {
		t.Errorf("want address-not-available, got %v", err)
	}
}
