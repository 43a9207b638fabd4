package kubelet

import "testing"

func TestRewritePaths(t *testing.T) {
	mounts := []mount{{path: "/var/run/rover/sub", dir: "/w/ns_p/b"}, {path: "/var/run/rover", dir: "/w/ns_p/a"}}
	for _, tc := range []struct{ arg, want string }{
		{"/var/run/rover/token", "/w/ns_p/a/token"},
		{"/var/run/rover", "/w/ns_p/a"},
		{"/var/run/rover/sub/x", "/w/ns_p/b/x"},
		{"--token-file=/var/run/rover/token", "--token-file=/w/ns_p/a/token"},
		{"/var/run/roverx/token", "/var/run/roverx/token"},
		{"x/var/run/rover/token", "x/var/run/rover/token"},
		{"--token-file", "--token-file"},
		{"/etc/a=/var/run/rover", "/etc/a=/var/run/rover"},
	} {
		if got := rewritePaths(tc.arg, mounts); got != tc.want {
			t.Errorf("rewritePaths(%q) = %q, want %q", tc.arg, got, tc.want)
		}
	}
}
