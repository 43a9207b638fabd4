// Package runconfigtest helps tests build a rover run configuration from a
// command line and a scripted environment.
package runconfigtest

import (
	"testing"

	"github.com/roverml/rover/internal/runconfig"
)

// Env is a getenv that reads m (nil: an empty environment).
func Env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Parse parses args (with `--no-python true` appended as the command) in
// the environment env, failing t when they do not parse.
func Parse(t testing.TB, env map[string]string, args ...string) *runconfig.Config {
	t.Helper()
	cfg, err := runconfig.Parse(append(args, "--no-python", "true"), Env(env))
	if err != nil {
		t.Fatalf("Parse(%q): %v", args, err)
	}
	return cfg
}
