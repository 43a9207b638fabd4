package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
)

// floodRSSBound is what the master's peak resident memory may reach during
// TestMasterMemoryUnderFloods: twice the measured peak (49-60 MiB, see
// docs/benchmarks.md), and above what the master's HTTP/2 settings allow
// (about 35 MiB idle, plus per connection a 256 KiB window of body, a 16 KiB
// frame and some 100 KiB of buffers: 90 MiB), while reading the bodies would
// take 1.2 GB per flood.
const floodRSSBound = 128 << 20

// TestMasterMemoryUnderFloods starts the real `rover master` and floods it
// with 150 concurrent requests of 8 MB each, four times: without the token
// over HTTP/1.1 (Connect's JSON protocol) and over h2c (gRPC, each on its
// own connection), then with the token but over the method's read limit, in
// both protocols. Every request is refused (401 or Unauthenticated;
// ResourceExhausted), the master stays up, and its peak resident memory
// (VmHWM in /proc/PID/status) stays within floodRSSBound. It asserts memory,
// not time.
func TestMasterMemoryUnderFloods(t *testing.T) {
	const n, size = 150, 8_000_000
	c := newCluster(t, "flood")
	token := readToken(t, c.tokenFile)
	pid := c.master.cmd.Process.Pid
	before := procStatus(t, pid)
	body := bytes.Repeat([]byte("x"), size) // shared by every request: the client side costs little

	floods := []struct {
		name string
		send func(i int) (string, error) // the refusal, as "401" or a connect code
	}{
		{"unauthenticated Connect over HTTP/1.1", func(int) (string, error) {
			return postHTTP1(c.addr, "/rover.v1.MasterService/GetJob", "", body)
		}},
		{"unauthenticated gRPC over h2c", func(int) (string, error) {
			return postGRPC(c.addr, "/rover.v1.MasterService/SetKey", "", body)
		}},
		{"oversized Connect over HTTP/1.1", func(int) (string, error) {
			return postHTTP1(c.addr, "/rover.v1.MasterService/SetKey", token, body)
		}},
		{"oversized gRPC over h2c", func(int) (string, error) {
			return postGRPC(c.addr, "/rover.v1.MasterService/SetKey", token, body)
		}},
	}
	want := map[string][]string{
		"unauthenticated Connect over HTTP/1.1": {"401"},
		"unauthenticated gRPC over h2c":         {connect.CodeUnauthenticated.String()},
		"oversized Connect over HTTP/1.1":       {"429"}, // resource_exhausted, in HTTP
		"oversized gRPC over h2c":               {connect.CodeResourceExhausted.String()},
	}
	for _, f := range floods {
		answers := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				a, err := f.send(i)
				if err != nil {
					// The master may close a connection before all of the
					// body is sent: a refusal too, without an answer.
					a = "closed"
				}
				answers[i] = a
			})
		}
		wg.Wait()
		counts := map[string]int{}
		for _, a := range answers {
			counts[a]++
		}
		for a := range counts {
			if a != "closed" && !slices.Contains(want[f.name], a) {
				t.Errorf("%s: answers %v, want %v (or a closed connection)", f.name, counts, want[f.name])
				break
			}
		}
		st := procStatus(t, pid)
		t.Logf("%s: %d requests of %.0f MB: %v; master VmHWM %.1f MiB, VmRSS %.1f MiB", f.name, n, float64(size)/1e6, counts, mib(st["VmHWM"]), mib(st["VmRSS"]))
	}

	after := procStatus(t, pid)
	t.Logf("master RSS: %.1f MiB before the floods, peak (VmHWM) %.1f MiB, %.1f MiB after; bound %d MiB",
		mib(before["VmRSS"]), mib(after["VmHWM"]), mib(after["VmRSS"]), floodRSSBound>>20)
	if after["VmHWM"] > floodRSSBound {
		t.Errorf("the master's peak RSS was %.1f MiB, over the %d MiB bound", mib(after["VmHWM"]), floodRSSBound>>20)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.New(hc, c.addr, token).GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{})); err != nil {
		t.Errorf("GetJob with the token after the floods: %v", err)
	}
}

// postHTTP1 sends body as a Connect JSON request on a connection of its own
// and returns the HTTP status.
func postHTTP1(addr, procedure, token string, body []byte) (string, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+procedure, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(client.AuthHeader, client.AuthScheme+token)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return strconv.Itoa(resp.StatusCode), nil
}

// postGRPC sends body as one gRPC message over h2c, on a connection of its
// own, and returns the gRPC status as a connect code.
func postGRPC(addr, procedure, token string, body []byte) (string, error) {
	env := make([]byte, 5)
	binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+procedure, io.MultiReader(bytes.NewReader(env), bytes.NewReader(body)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if token != "" {
		req.Header.Set(client.AuthHeader, client.AuthScheme+token)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	status := resp.Trailer.Get("Grpc-Status")
	if status == "" {
		status = resp.Header.Get("Grpc-Status") // a trailers-only answer
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return "", fmt.Errorf("no gRPC status (HTTP %d)", resp.StatusCode)
	}
	return connect.Code(code).String(), nil
}

// procStatus reads the byte counts of /proc/PID/status (VmRSS, VmHWM, ...).
func procStatus(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[k] = kb << 10
		}
	}
	if out["VmHWM"] == 0 {
		t.Fatalf("no VmHWM in /proc/%d/status", pid)
	}
	return out
}

func readToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
