package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/runconfig"
)

// A job without `rover master`: the agents were given an endpoint (or, with
// --rdzv-backend=static, a --master-addr) but no token file. With no token
// at all, or with one in $ROVER_TOKEN and nothing listening on the
// endpoint (hostWithEnvToken), the agent that can bind the endpoint hosts the job's master there (node rank 0, or, without
// node ranks, whichever agent binds it first) and the others join it. The
// token is derived from the job's secret ($ROVER_JOB_SECRET) and --rdzv-id,
// or, with no secret and an endpoint on loopback, kept in a file only this
// user can read. docs/user-guide.md ("Launching without a master") and
// docs/security.md say what that trusts.

// hostedMasterTimeout is the default master_timeout of a job without
// `rover master`: when the agent hosting the master is gone, nothing brings
// the master back, so the others give up sooner than the 600s they wait
// for a `rover master` to restart.
const hostedMasterTimeout = 60 * time.Second

// masterless reports whether cfg runs a job without `rover master`: an
// endpoint but no token (--token-file, ROVER_TOKEN_FILE or ROVER_TOKEN).
func masterless(cfg *runconfig.Config, getenv func(string) string) bool {
	return !cfg.Standalone && cfg.RdzvEndpoint != "" && cfg.TokenFile == "" && strings.TrimSpace(getenv(client.TokenEnv)) == ""
}

// mayHost reports whether the agent of a job without `rover master` tries
// to host the job's master: node rank 0, or any agent when no node ranks
// are given (the first to bind the endpoint hosts it).
func mayHost(cfg *runconfig.Config) bool { return cfg.NodeRank <= 0 }

// tokenSource says where a job's token came from, for error messages.
type tokenSource string

// hostedToken returns the token of a job without `rover master`: derived
// from $ROVER_JOB_SECRET and the job's name; else, for an endpoint on
// loopback (every agent on this machine), the token in this user's private
// token file for the job and endpoint (made by the first agent); else a
// usage error: a guessable token on a network is refused.
func hostedToken(cfg *runconfig.Config, getenv func(string) string, tmp string) (string, tokenSource, error) {
	if secret := strings.TrimSpace(getenv(runconfig.JobSecretEnv)); secret != "" {
		tok, err := client.JobToken(secret, cfg.RunID)
		if err != nil {
			return "", "", exitErr(ExitUsage, "$%s: %w", runconfig.JobSecretEnv, err)
		}
		return tok, tokenSource("$" + runconfig.JobSecretEnv + " and --rdzv-id=" + cfg.RunID), nil
	}
	if !loopback(cfg.RdzvEndpoint) {
		return "", "", exitErr(ExitUsage, "this job has no `rover master` (no --token-file or ROVER_TOKEN), so its agents host the master at %s, "+
			"and they need a shared secret to derive the job's token from: set %s to the same random string (at least %d characters, "+
			"e.g. `openssl rand -hex 32`, from a Kubernetes Secret or your scheduler's secret store) for every agent of the job; "+
			"or, if a `rover master` runs at %s, pass its --token-file",
			cfg.RdzvEndpoint, runconfig.JobSecretEnv, client.MinTokenLen, cfg.RdzvEndpoint)
	}
	path, err := privateTokenPath(tmp, os.Getuid(), cfg.RunID, cfg.RdzvEndpoint)
	if err != nil {
		return "", "", exitErr(ExitUsage, "%w; or set %s for every agent of the job", err, runconfig.JobSecretEnv)
	}
	tok, err := loadOrCreateToken(path)
	if err != nil {
		return "", "", exitErr(ExitUsage, "%w; or set %s for every agent of the job", err, runconfig.JobSecretEnv)
	}
	return tok, tokenSource("the private token file " + path), nil
}

// loopback reports whether endpoint's host is a loopback address or
// "localhost": then every agent of the job runs on this machine.
func loopback(endpoint string) bool {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// privateTokenPath is where the agents of a job on loopback keep its
// token: TMP/rover-UID/jobs/JOB@ENDPOINT.token, in a directory that must
// be this user's alone (mode 0700, not a link), which it makes if missing.
func privateTokenPath(tmp string, uid int, job, endpoint string) (string, error) {
	dir := filepath.Join(tmp, "rover-"+strconv.Itoa(uid))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create the private token directory %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("check the private token directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != uid || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("the private token directory %s is not a directory of user %d with mode 0700 (it is %v): "+
			"another user may have made it; remove it, or set TMPDIR to a directory of your own", dir, uid, fi.Mode())
	}
	jobs := filepath.Join(dir, "jobs")
	if err := os.MkdirAll(jobs, 0o700); err != nil {
		return "", fmt.Errorf("create the private token directory %s: %w", jobs, err)
	}
	return filepath.Join(jobs, sanitize(job)+"@"+sanitize(endpoint)+".token"), nil
}

// loadOrCreateToken reads the token in path, or makes a fresh one there
// (mode 0600): the first agent of the job makes it, and every other reads
// the same. A file is linked into place whole, so no reader sees half a
// token.
func loadOrCreateToken(path string) (string, error) {
	if tok, err := client.ReadToken(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return "", fmt.Errorf("create the job's token file: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.WriteString(newToken() + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("write the job's token file: %w", err)
	}
	if err := os.Link(f.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create the job's token file: %w", err)
	}
	return client.ReadToken(path) // ours, or the one another agent linked first
}

// listenToHost binds the job's endpoint for the master this agent is to
// host. It fails when another process holds the port (an agent that hosts
// it already, or a `rover master`) or when the endpoint is not one of this
// host's addresses: then the agent joins whoever hosts it.
func listenToHost(endpoint string) (net.Listener, error) {
	return net.Listen("tcp", endpoint)
}

// hostMaster hosts the job's master on its endpoint when this agent can
// bind it, and returns what stops it (a no-op when another hosts it). Once
// the job ended, the master waits up to the heartbeat timeout for the other
// agents to hear the outcome before it stops.
func (a *agent) hostMaster(ctx context.Context, token string, ln net.Listener, endRun context.CancelCauseFunc) (stop func(), err error) {
	if ln == nil {
		ln, err = listenToHost(a.cfg.RdzvEndpoint)
	}
	if err != nil {
		if a.cfg.NodeRank == 0 {
			a.log.Warn("node rank 0 does not host the job's master: it cannot listen on the endpoint; joining whoever hosts it",
				"endpoint", a.cfg.RdzvEndpoint, "err", err)
		} else {
			a.log.Info("another agent hosts the job's master; joining it", "endpoint", a.cfg.RdzvEndpoint, "err", err)
		}
		return func() {}, nil
	}
	m, err := a.startMaster(ctx, EmbeddedMaster{Listener: ln, Token: token, Drain: a.cfg.HeartbeatTimeout})
	if err != nil {
		return nil, err
	}
	a.log.Info("hosting the job's master (no `rover master` runs for this job)", "endpoint", a.cfg.RdzvEndpoint)
	go a.watchMaster(ctx, m, endRun)
	return m.Stop, nil
}

// hostWithEnvToken returns the job's endpoint, bound, when this agent is
// to host the job's master with the token in $ROVER_TOKEN: the token comes
// from the environment only (no --token-file, which a `rover master`
// writes; no ROVER_MASTER_ADDR or DLROVER_MASTER_ADDR, which the platforms
// that run a job's master set), the agent may host (node rank 0, or no
// node ranks), the client
// speaks cleartext (the hosted master does), and nothing listens on the
// endpoint, which is one of this host's addresses. A `rover master` of the
// job holds its port, so an agent never hosts beside one that runs: the
// token in the environment says what every agent of the job shares, not
// that a `rover master` runs (before, such agents waited for one that no
// one started). It returns nil otherwise: the agent joins whoever listens.
func (a *agent) hostWithEnvToken() net.Listener {
	if a.cfg.TokenFile != "" || a.cfg.TLSCA != "" || a.cfg.EndpointNamesMaster() || !mayHost(a.cfg) ||
		strings.TrimSpace(a.opts.Getenv(client.TokenEnv)) == "" {
		return nil
	}
	ln, err := listenToHost(a.cfg.RdzvEndpoint)
	if err != nil {
		a.log.Info("a master, or another agent hosting one, holds the endpoint, or it is not this host's; joining it",
			"endpoint", a.cfg.RdzvEndpoint, "err", err)
		return nil
	}
	return ln
}

// hostedMasterLost is masterLost in a job without `rover master`.
func (a *agent) hostedMasterLost(err error) error {
	return exitErr(ExitMasterLost, "lost the job's master at %s for longer than master_timeout (%s): %w; "+
		"this job runs without `rover master`: the agent of node rank 0 (on the host of %s) hosted the master, "+
		"and that agent or its node is gone, which the job cannot survive. Restart every node's agent to run the job again "+
		"(with --checkpoint-dir it resumes from its last committed checkpoint); to survive the loss of any node, "+
		"run `rover master --state-dir DIR` on a host of its own and give the agents its --token-file",
		a.addr, a.cfg.MasterTimeout, err, a.addr)
}

// hostedJoinError says why the first join failed in a job without `rover
// master`: nobody hosts the master, or the master refused the token.
func (a *agent) hostedJoinError(err error) error {
	if unreachable(err) {
		return exitErr(ExitRendezvous, "no agent hosted the job's master at %s within the join timeout (%s): %w; "+
			"without `rover master`, the agent of node rank 0 hosts it: start that agent on the host whose address the endpoint names "+
			"(--rdzv-endpoint, MASTER_ADDR, or --master-addr with --rdzv-backend=static), and check that the port is free there",
			a.addr, a.cfg.JoinTimeout, err)
	}
	if connect.CodeOf(err) == connect.CodeUnauthenticated {
		return exitErr(ExitRendezvous, "the master at %s refused this agent's token, from %s: %w; "+
			"give every agent of the job the same %s and --rdzv-id, or, if a `rover master` runs there, pass its --token-file",
			a.addr, a.tokenFrom, err, runconfig.JobSecretEnv)
	}
	return exitErr(ExitRendezvous, "join the job: %w", err)
}

// newToken returns a fresh random token: 256 bits, in hex.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
