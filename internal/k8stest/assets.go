package k8stest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// KubeVersion is the Kubernetes release that testbin/ builds and that the
// root module's k8s.io/* v0.37.x libraries match.
const KubeVersion = "v1.37.2"

// modulePath names the root module; RepoRoot looks for its go.mod.
const modulePath = "github.com/roverml/rover"

// buildHint tells a developer how to get the binaries into dir. It ends every
// error about missing binaries.
func buildHint(dir string) string {
	return fmt.Sprintf("build them with `make testbin TESTBIN=%s` (or `testbin/build.sh %s`) "+
		"from the repository root; it takes about 5-7 min once on 2 cores (docs/design/k8s-testing.md)", dir, dir)
}

// DefaultAssetsDir is where `make testbin` puts the binaries:
// $HOME/.cache/rover/testbin-v1.37.2. It returns "" when there is no home
// folder.
func DefaultAssetsDir() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "rover", "testbin-"+KubeVersion)
}

// AssetsDir returns the folder that holds kube-apiserver and etcd:
// KUBEBUILDER_ASSETS when set, else DefaultAssetsDir. The error says what is
// missing and how to build it.
func AssetsDir() (string, error) {
	if dir, ok := os.LookupEnv("KUBEBUILDER_ASSETS"); ok && dir != "" {
		if err := checkBinaries(dir, "kube-apiserver", "etcd"); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s: %w", dir, err)
		}
		return dir, nil
	}
	dir := DefaultAssetsDir()
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is unset and there is no home folder for the default: " +
			"build the binaries with `testbin/build.sh DIR` and set KUBEBUILDER_ASSETS=DIR")
	}
	if err := checkBinaries(dir, "kube-apiserver", "etcd"); err != nil {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is unset and the default folder %s: %w", dir, err)
	}
	return dir, nil
}

// checkBinaries reports the names that dir lacks as executable files.
func checkBinaries(dir string, names ...string) error {
	var missing []string
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no executable %s there: %s", strings.Join(missing, ", "), buildHint(dir))
	}
	return nil
}

// RepoRoot returns the root of the Rover repository: the nearest folder at
// or above the working directory whose go.mod declares module
// github.com/roverml/rover. It fails the test when there is none.
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("k8stest: find the repository root: %v", err)
	}
	root, err := findRepoRoot(wd)
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	return root
}

func findRepoRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if mod, err := readModulePath(filepath.Join(d, "go.mod")); err == nil && mod == modulePath {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("find the repository root: no go.mod of module %s at or above %s", modulePath, dir)
		}
	}
}

// readModulePath returns the module path a go.mod declares.
func readModulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no module line")
}

// crdPaths resolves dirs against root and drops, when allowMissing, those
// that do not exist; logf reports each one dropped.
func crdPaths(root string, dirs []string, allowMissing bool, logf func(string, ...any)) ([]string, error) {
	var paths []string
	for _, dir := range dirs {
		p := dir
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		if _, err := os.Stat(p); err != nil {
			if errors.Is(err, os.ErrNotExist) && allowMissing {
				logf("k8stest: CRD folder %s does not exist; installing no CRDs from it", p)
				continue
			}
			return nil, fmt.Errorf("CRD folder %s: %w (set Options.AllowMissingCRDDirs to tolerate a missing one)", dir, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
