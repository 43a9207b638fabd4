package proc

import (
	"bytes"
	"os"
	"strconv"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every Linux platform Go supports.
const clockTicks = 100

// CPUSeconds is the CPU time, user and system, that process pid and its
// children it has waited for have used; ok is false when pid is gone or
// its stat cannot be read. Linux only.
func CPUSeconds(pid int) (seconds float64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime, stime, cutime and cstime (fields 14 to 17) of
// a /proc/PID/stat line; the command, field 2, may hold spaces and
// parentheses, so fields are counted from its last ')'.
func parseStatCPU(b []byte) (float64, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 15 {
		return 0, false
	}
	var sum uint64
	for _, field := range f[11:15] { // fields 14..17, counted from field 3
		v, err := strconv.ParseUint(string(field), 10, 64)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return float64(sum) / clockTicks, true
}

// TaggedCPUSeconds is the CPU time of every live process whose environment
// holds tag (see KillTagged): a node's processes, however deep. A process
// that ended is counted in its parent's once the parent waited for it.
func TaggedCPUSeconds(tag string) (seconds float64, ok bool) {
	for _, pid := range TaggedPids([]byte(tag)) {
		if s, found := CPUSeconds(pid); found {
			seconds, ok = seconds+s, true
		}
	}
	return seconds, ok
}
