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

// TreeUsage is the resident memory (bytes) and CPU time (seconds) of
// process pid and its descendants, from /proc (children lists need Linux
// 3.5 with CONFIG_PROC_CHILDREN; without them only pid counts). ok is
// false when pid is gone.
func TreeUsage(pid int) (rssBytes int64, cpuSeconds float64, ok bool) {
	seen := map[int]bool{}
	todo := []int{pid}
	for len(todo) > 0 && len(seen) < 4096 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		u, live := readProcUsage(p)
		if !live {
			if p == pid {
				return 0, 0, false
			}
			continue
		}
		rssBytes += u.rssBytes
		cpuSeconds += u.cpuSeconds
		todo = append(todo, procChildren(p)...)
	}
	return rssBytes, cpuSeconds, true
}

// procChildren lists the children of pid's threads.
func procChildren(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
