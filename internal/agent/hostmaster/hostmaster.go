// Package hostmaster decides whether an agent hosts the master of a job
// run without `rover master`, and with which token: the agent that can bind
// the job's endpoint hosts the master there, and every agent derives (or
// shares, on one machine) the same token. It does not run the master: the
// program's agent.Options.StartMaster does, which the agent calls.
//
// A job without `rover master`: the agents were given an endpoint (or, with
// --rdzv-backend=static, a --master-addr) but no token file. With no token
// at all, or with one in $ROVER_TOKEN and nothing listening on the
// endpoint (ListenWithEnvToken), the agent that can bind the endpoint
// hosts the job's master there (node rank 0, or, without node ranks,
// whichever agent binds it first) and the others join it. The
// token is derived from the job's secret ($ROVER_JOB_SECRET) and --rdzv-id,
// or, with no secret and an endpoint on loopback, kept in a file only this
// user can read. docs/user-guide.md ("Launching without a master") and
// docs/security.md say what that trusts.
package hostmaster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roverml/rover/internal/agent/privdir"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/runconfig"
)

// DefaultMasterTimeout is the default master_timeout of a job without
// `rover master`: when the agent hosting the master is gone, nothing brings
// the master back, so the others give up sooner than the 600s they wait
// for a `rover master` to restart.
const DefaultMasterTimeout = 60 * time.Second

// Masterless reports whether cfg runs a job without `rover master`: an
// endpoint but no token (--token-file, ROVER_TOKEN_FILE or ROVER_TOKEN).
func Masterless(cfg *runconfig.Config, getenv func(string) string) bool {
	return !cfg.Standalone && cfg.RdzvEndpoint != "" && cfg.TokenFile == "" && strings.TrimSpace(getenv(client.TokenEnv)) == ""
}

// MayHost reports whether the agent of a job without `rover master` tries
// to host the job's master: node rank 0, or any agent when no node ranks
// are given (the first to bind the endpoint hosts it).
func MayHost(cfg *runconfig.Config) bool { return cfg.NodeRank <= 0 }

// Source says where a job's token came from, for error messages.
type Source string

// Token returns the token of a job without `rover master`: derived
// from $ROVER_JOB_SECRET and the job's name; else, for an endpoint on
// loopback (every agent on this machine), the token in this user's private
// token file for the job and endpoint (made by the first agent); else a
// usage error: a guessable token on a network is refused.
func Token(cfg *runconfig.Config, getenv func(string) string, tmp string) (string, Source, error) {
	if secret := strings.TrimSpace(getenv(runconfig.JobSecretEnv)); secret != "" {
		tok, err := client.JobToken(secret, cfg.RunID)
		if err != nil {
			return "", "", fmt.Errorf("$%s: %w", runconfig.JobSecretEnv, err)
		}
		return tok, Source("$" + runconfig.JobSecretEnv + " and --rdzv-id=" + cfg.RunID), nil
	}
	if !loopback(cfg.RdzvEndpoint) {
		return "", "", fmt.Errorf("this job has no `rover master` (no --token-file or ROVER_TOKEN), so its agents host the master at %s, "+
			"and they need a shared secret to derive the job's token from: set %s to the same random string (at least %d characters, "+
			"e.g. `openssl rand -hex 32`, from a Kubernetes Secret or your scheduler's secret store) for every agent of the job; "+
			"or, if a `rover master` runs at %s, pass its --token-file",
			cfg.RdzvEndpoint, runconfig.JobSecretEnv, client.MinTokenLen, cfg.RdzvEndpoint)
	}
	path, err := privateTokenPath(tmp, os.Getuid(), cfg.RunID, cfg.RdzvEndpoint)
	if err != nil {
		return "", "", fmt.Errorf("%w; or set %s for every agent of the job", err, runconfig.JobSecretEnv)
	}
	tok, err := loadOrCreateToken(path)
	if err != nil {
		return "", "", fmt.Errorf("%w; or set %s for every agent of the job", err, runconfig.JobSecretEnv)
	}
	return tok, Source("the private token file " + path), nil
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
	return filepath.Join(jobs, privdir.SafeName(job)+"@"+privdir.SafeName(endpoint)+".token"), nil
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
	_, werr := f.WriteString(NewToken() + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("write the job's token file: %w", err)
	}
	if err := os.Link(f.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create the job's token file: %w", err)
	}
	return client.ReadToken(path) // ours, or the one another agent linked first
}

// Listen binds the job's endpoint for the master this agent is to
// host. It fails when another process holds the port (an agent that hosts
// it already, or a `rover master`) or when the endpoint is not one of this
// host's addresses: then the agent joins whoever hosts it.
func Listen(endpoint string) (net.Listener, error) {
	return net.Listen("tcp", endpoint)
}

// ListenWithEnvToken returns the job's endpoint, bound, when this agent is
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
func ListenWithEnvToken(cfg *runconfig.Config, getenv func(string) string, log *slog.Logger) net.Listener {
	if cfg.TokenFile != "" || cfg.TLSCA != "" || cfg.EndpointNamesMaster() || !MayHost(cfg) ||
		strings.TrimSpace(getenv(client.TokenEnv)) == "" {
		return nil
	}
	ln, err := Listen(cfg.RdzvEndpoint)
	if err != nil {
		log.Info("a master, or another agent hosting one, holds the endpoint, or it is not this host's; joining it",
			"endpoint", cfg.RdzvEndpoint, "err", err)
		return nil
	}
	return ln
}

// NewToken returns a fresh random token: 256 bits, in hex.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
