//go:build !linux

package prober

import "syscall"

// streamSocket opens a TCP socket, close-on-exec and non-blocking (two
// steps where the flags cannot go with socket(2): a fork in between may
// inherit it, which costs nothing here but a held port).
func streamSocket(family int) (int, error) {
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}
