// Package robustness probes the real `rover` binary with hostile and
// unlucky inputs and events, one table row per probe (robustness_test.go),
// and checks the same invariants after each: the exit code, a fragment of
// the message, a bound on the process's peak memory (its rusage's max RSS),
// no process of the probe left running (every process the probe starts
// inherits a tag in its environment, ROVER_PROBE), and nothing left in
// /dev/shm by the probe's job. It has no code of its own outside its tests;
// it runs in `make test` (go test ./...) and takes about a minute, most of
// it building rover.
//
// Probes (probes_test.go):
//
//   - malformed YAML, deeply nested YAML, a billion-laughs alias bomb:
//     refused with exit 2, in bounded memory;
//   - a shell launcher line read for the plan (--dry-run) runs nothing,
//     and a template's env value with $(...) and backquotes is never
//     evaluated as shell;
//   - a wrong token against a running master: refused with exit 1;
//   - a second master on a state directory in use: refused;
//   - Ctrl-C (SIGINT) and SIGTERM of rover submit while its workers train:
//     exit 130 and 143, every node and worker stopped, /dev/shm clean;
//   - SIGKILL of rover submit whose workers have children of their own
//     (`bash -c "sleep ...; echo"`): every process of the job ends, /dev/shm
//     is clean;
//   - SIGKILL of a node's agent while rover submit runs: the worker's own
//     child goes at once, not at the job's end;
//   - SIGTERM while many nodes are still starting: no node is left;
//   - a job of a million replicas, or 1e9: refused with exit 2 naming
//     spec.replicaSpecs.worker.replicas (and nodes are created through a
//     window, never all up front);
//   - an empty journal.db and a file that is no journal: the master
//     refuses them (exit 1) and names --discard-state;
//   - /dev/zero as --token-file or --tls-ca: exit 2 naming the 16 MiB
//     bound, in bounded memory;
//   - --nnodes 2000000, --nproc-per-node 100000, --hang-timeout 100000h:
//     exit 2, every flag named at once;
//   - a duplicate key in a job spec, a spec past the 1 MiB size cap:
//     exit 2, named;
//   - scripts/apt-install: one line of output, apt-get's log shown only
//     when it fails (TestAptInstallIsQuiet).
//
// Probes that need more than one process of their own (ENOSPC of a
// master's disk, an impostor agent, ROVER_TOKEN with no master, settings
// differing at join, a TLS peer that never answers, a plain HTTP server,
// the node check without torch) are end-to-end tests in test/e2e and
// cmd/rover. A row is a few lines: the command line ({dir} is the probe's own directory, {job}
// a job name no other run uses, {addr} the fixture master's address),
// files to write first, and what to expect. ROVER_ROBUSTNESS_BIN runs the
// probes against another build (an older release, to see a row fail).
package robustness
