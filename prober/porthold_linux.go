package prober

import "syscall"

// streamSocket opens a TCP socket, close-on-exec and non-blocking, in one
// call.
func streamSocket(family int) (int, error) {
	return syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
}
