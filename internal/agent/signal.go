package agent

import "syscall"

func sysSignal(n int32) syscall.Signal { return syscall.Signal(n) }
