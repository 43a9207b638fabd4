//go:build !linux

package tcpinfo

import "errors"

// Processes is Linux-only (sock_diag).
func Processes(pids []int) ([]Conn, error) {
	return nil, errors.New("reading TCP statistics needs Linux's sock_diag")
}
