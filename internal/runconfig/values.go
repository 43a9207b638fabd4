package runconfig

import (
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultRdzvPort is the port of --rdzv-endpoint when none is given.
const defaultRdzvPort = 29400

// parseBool reads a boolean flag's value: "true" when the flag stands alone,
// or the text after "=" / in a PET_ variable (torchrun uses 0 and 1).
func parseBool(raw string) (bool, error) {
	v, err := strconv.ParseBool(strings.TrimSpace(raw))
	if err != nil {
		return false, errors.New("want true or false (or 1 or 0); a flag given alone means true")
	}
	return v, nil
}

// ParseInt reads a whole number, as every integer flag of `rover run` and
// `rover master` is read.
func ParseInt(raw string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return n, nil
}

// byteUnits are ParseBytes's suffixes.
var byteUnits = []struct {
	suffix string
	n      int64
}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}

// ParseBytes reads a size in bytes: a whole number with an optional
// suffix, Ki Mi Gi Ti (powers of 1024) or k M G T (of 1000), e.g. "512Mi".
func ParseBytes(raw string) (int64, error) {
	s := strings.TrimSpace(raw)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, errors.New(`want bytes: a whole number with an optional suffix Ki, Mi, Gi, Ti (or k, M, G, T), e.g. "512Mi"`)
	}
	return n * mult, nil
}

// maxSeconds keeps seconds-to-Duration conversion in range (about 292 years).
const maxSeconds = float64(math.MaxInt64) / float64(time.Second)

// ParseSeconds reads a duration: a plain number is seconds ("30", "0.5"),
// anything else a Go duration ("500ms", "10m"). `rover run` and `rover
// master` read every duration with it.
func ParseSeconds(raw string) (time.Duration, error) {
	s := strings.TrimSpace(raw)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= maxSeconds {
			return 0, errors.New("want a finite number of seconds")
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want seconds (e.g. 30 or 0.5) or a duration (e.g. 500ms or 10m)")
	}
	return d, nil
}

// ParseNNodes reads --nnodes: "N" or "MIN:MAX". Ranges are checked by
// Policy.Check.
func ParseNNodes(raw string) (lo, hi int, err error) {
	bad := errors.New("want N or MIN:MAX, e.g. 2 or 1:4")
	s := strings.TrimSpace(raw)
	a, b, isRange := strings.Cut(s, ":")
	lo, err = strconv.Atoi(strings.TrimSpace(a))
	if err != nil {
		return 0, 0, bad
	}
	if !isRange {
		return lo, lo, nil
	}
	hi, err = strconv.Atoi(strings.TrimSpace(b))
	if err != nil {
		return 0, 0, bad
	}
	return lo, hi, nil
}

// parseNproc reads --nproc-per-node: a number, or auto (one per GPU, else one
// per CPU), gpu (one per GPU; an error without GPUs) or cpu (one per CPU).
func parseNproc(raw string, gpus, cpus func() int) (int, error) {
	switch s := strings.TrimSpace(raw); s {
	case "auto":
		if n := gpus(); n > 0 {
			return n, nil
		}
		return cpus(), nil
	case "gpu":
		if n := gpus(); n > 0 {
			return n, nil
		}
		return 0, errors.New("no NVIDIA GPUs found on this node (no /dev/nvidia0, /dev/nvidia1, ...); give a number, or use auto or cpu")
	case "cpu":
		return cpus(), nil
	default:
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, errors.New("want a number of worker processes, or auto, gpu or cpu")
		}
		return n, nil
	}
}

// countNVIDIAGPUs counts the GPU device files /dev/nvidia0, /dev/nvidia1, ...
func countNVIDIAGPUs() int {
	m, _ := filepath.Glob("/dev/nvidia[0-9]*")
	return len(m)
}

// normalizeEndpoint turns HOST[:PORT] into host:port with the default port
// 29400; IPv6 addresses must be in brackets. "" stays "" (no endpoint).
// The port's range is checked by Validate.
func normalizeEndpoint(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", nil
	}
	if strings.Contains(s, "://") {
		return "", errors.New("want HOST[:PORT], not a URL; drop the scheme")
	}
	var host, port string
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", errors.New("missing ] after the IPv6 address; write [ADDR]:PORT")
		}
		host = s[1:end]
		switch rest := s[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			port = rest[1:]
			if port == "" {
				return "", errors.New("empty port after ':'; write [ADDR]:PORT or leave out ':'")
			}
		default:
			return "", errors.New("unexpected text after ']'; write [ADDR]:PORT")
		}
	} else {
		if strings.Count(s, ":") > 1 {
			return "", fmt.Errorf("put IPv6 addresses in brackets: [%s]:%d", s, defaultRdzvPort)
		}
		var hasPort bool
		host, port, hasPort = strings.Cut(s, ":")
		if hasPort && port == "" {
			return "", errors.New("empty port after ':'; write HOST:PORT or leave out ':'")
		}
	}
	if host == "" {
		return "", errors.New("missing host; want HOST[:PORT]")
	}
	if strings.ContainsFunc(host, badHostRune) {
		return "", fmt.Errorf("host %q has characters not allowed in a host name or address", host)
	}
	p := defaultRdzvPort
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 0 {
			return "", fmt.Errorf("port %q is not a port number (1-65535)", port)
		}
		p = n
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// badHostRune reports runes that cannot appear in a host name, an IPv4
// address or an IPv6 address (with a %zone).
func badHostRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	case r == '.', r == '-', r == '_', r == ':', r == '%':
		return false
	}
	return true
}

// stdSyntax describes --redirects and --tee values.
const stdSyntax = "want 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or LOCAL_RANK:VALUE pairs such as 0:1,1:2"

// parseStdSpec reads --redirects/--tee: "N" for every local rank, or
// "RANK:N,RANK:N" (ranks not listed get 0). Values are checked by Validate.
func parseStdSpec(raw string) (StdSpec, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, ":") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return StdSpec{}, errors.New(stdSyntax)
		}
		return StdSpec{Default: n}, nil
	}
	spec := StdSpec{PerRank: map[int]int{}}
	for part := range strings.SplitSeq(s, ",") {
		r, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		rank, err1 := strconv.Atoi(strings.TrimSpace(r))
		val, err2 := strconv.Atoi(strings.TrimSpace(v))
		if !ok || err1 != nil || err2 != nil {
			return StdSpec{}, fmt.Errorf("bad pair %q: %s", part, stdSyntax)
		}
		spec.PerRank[rank] = val
	}
	return spec, nil
}

// parseRankList reads --local-ranks-filter: comma-separated local ranks.
// "" means all ranks (nil). The result is sorted and without duplicates.
func parseRankList(raw string) ([]int, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return nil, nil
	}
	var ranks []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q is not a local rank; want comma-separated numbers such as 0,1,3", part)
		}
		ranks = append(ranks, n)
	}
	slices.Sort(ranks)
	return slices.Compact(ranks), nil
}
