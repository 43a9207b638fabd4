package metrics

import (
	"os"
	"strconv"
	"strings"
)

// procUsage is a process's resident memory and CPU time, from /proc.
type procUsage struct {
	rssBytes   int64
	cpuSeconds float64
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// readProcUsage reads /proc/PID/stat; ok is false when the process is gone
// (or there is no /proc).
func readProcUsage(pid int) (u procUsage, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return u, false
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime, stime (fields 14 and 15) and rss (24, in
// pages) of a /proc/PID/stat line. The command (field 2) is in parentheses
// and may hold spaces and parentheses: fields are counted from the last ")".
func parseProcStat(s string) (u procUsage, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return u, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return u, false
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	rss, err3 := strconv.ParseInt(f[21], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return u, false
	}
	return procUsage{rssBytes: rss * int64(os.Getpagesize()), cpuSeconds: float64(utime+stime) / clockTicks}, true
}
