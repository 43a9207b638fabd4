//go:build !linux

package ckptsaver

// lowerThreadPriority is a no-op off Linux: persistence runs at normal
// priority.
func lowerThreadPriority() bool { return false }

func threadIsIdle() bool { return false }
