package proc

import "syscall"

// Class is the coarse reason a worker ended, following DLRover's exit-code
// conventions. The zero value is Unknown, so an unset Class never reads as
// success.
type Class int

// Exit classes.
const (
	Unknown     Class = iota // anything not listed below
	Succeeded                // exit status 0
	UserError                // exit status 1, or SIGABRT / 134 (core dump)
	Killed                   // SIGKILL / 137, SIGTERM / 143, SIGINT / 130
	OutOfMemory              // exit status 247
	Hardware                 // exit status 201 (GPU driver), 202 (GPU residue), 14 (GPU InfoROM corrupted)
)

// String returns a lower-case, hyphenated name such as "user-error".
func (c Class) String() string {
	switch c {
	case Succeeded:
		return "succeeded"
	case UserError:
		return "user-error"
	case Killed:
		return "killed"
	case OutOfMemory:
		return "out-of-memory"
	case Hardware:
		return "hardware"
	default:
		return "unknown"
	}
}

// Classify maps an Exit to a Class. It looks at the shell-style status
// (see [Exit.ShellCode]), so a worker killed by SIGKILL and a wrapper script
// that exits with 137 on its behalf classify alike.
func Classify(e Exit) Class {
	switch e.ShellCode() {
	case 0:
		return Succeeded
	case 1, 128 + int(syscall.SIGABRT):
		return UserError
	case 128 + int(syscall.SIGKILL), 128 + int(syscall.SIGTERM), 128 + int(syscall.SIGINT):
		return Killed
	case 247:
		return OutOfMemory
	case 201, 202, 14:
		return Hardware
	default:
		return Unknown
	}
}
