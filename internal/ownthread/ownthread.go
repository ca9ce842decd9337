//go:build linux

// Package ownthread runs a function on an OS thread of its own that ends
// with it, so the function may change what belongs to its thread (its
// network namespace) without the change reaching any other goroutine.
//
// The thread is never the process's main thread. Go does not end a main
// thread left locked; it parks it, in whatever namespace it was moved to,
// for the rest of the process. And the main thread's namespace is the one
// /proc/self/net and /proc/PID/ns/net show for the whole process: a parked
// main thread in a test's namespace made /proc/net/netstat read that
// namespace's counters from then on (the prober's retransmitted-SYN test
// waited on a counter that could not move), and would make lab down take
// the process for a lab process.
package ownthread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Go runs f on a new goroutine locked to a thread other than the main one,
// and lets the thread end when f returns (it is never unlocked).
//
// It does not depend on scheduling luck: a goroutine that lands on the main
// thread keeps it locked while it starts the next one and waits for it, so
// the runtime must run that one on another thread.
func Go(f func()) {
	go runLocked(f, make(chan struct{}))
}

// runLocked locks the calling goroutine's thread; on the main thread it
// hands f to a goroutine that cannot run there, on any other it closes
// started and runs f, never unlocking.
func runLocked(f func(), started chan struct{}) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		handedOff := make(chan struct{})
		go runLocked(f, handedOff)
		<-handedOff // while this goroutine holds the main thread
		close(started)
		runtime.UnlockOSThread()
		return
	}
	close(started)
	f() // never unlocked: the thread ends with this goroutine
}
