package prober

import (
	"syscall"
	"unsafe"
)

// The loops' reads, writes and polls for ready events never block: their
// sockets are non-blocking and the poll waits 0. Made through syscall.Read
// and the like, each still tells the runtime that it may (entersyscall), and
// a busy loop is inside one most of the time: Go's sysmon then wakes every
// 20 µs to look for a P stuck in a system call and hands the loop's P to
// another thread when it finds one, so the loop moves between threads
// (futex wake-ups and context switches). Made raw, the loop looks to the
// runtime like a goroutine that runs and yields (it yields every busy
// round), and sysmon backs off.

func rawRead(fd int, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(bufPointer(b)), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd int, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(bufPointer(b)), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawReadyEvents is epoll_wait(2) with a timeout of 0 (epoll_pwait with
// no signal mask: arm64 has no epoll_wait).
func rawReadyEvents(epfd int, events []syscall.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd),
		uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func bufPointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
