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
//   - shell injection in a job spec's launcher line: refused, nothing run;
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
//   - a job of a million replicas stopped with SIGTERM: bounded memory
//     (nodes are created through a window, not all up front);
//   - scripts/apt-install: one line of output, apt-get's log shown only
//     when it fails (TestAptInstallIsQuiet).
//
// Probes of other findings join the table as their fixes land (the TODO
// rows at the end of probes_test.go say what each expects). A row is a
// few lines: the command line ({dir} is the probe's own directory, {job}
// a job name no other run uses, {addr} the fixture master's address),
// files to write first, and what to expect. ROVER_ROBUSTNESS_BIN runs the
// probes against another build (an older release, to see a row fail).
package robustness
