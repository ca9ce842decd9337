package prober

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// closeWatcher learns that a server closed a kept-alive connection while it
// sat idle, without a system call per request: every reusable connection's
// socket is also registered in a private epoll set for EPOLLRDHUP only (FIN
// received; errors and hang-ups are always reported), so the set reports
// nothing while connections are healthy and one event when a peer closes.
// A single goroutine waits on it and flags the connection; a worker checks
// the flag before reusing it. This is the job net/http's per-connection
// readLoop does, without a goroutine per connection.
//
// The epoll set's own descriptor is non-blocking and waited on through Go's
// netpoller (an epoll fd is readable when it has events), so no thread sits
// in a blocking epoll_wait(2).
//
// A close that lands between the check and the request going out is the
// keep-alive race, reported as eof_reused as for any client.
type closeWatcher struct {
	epfd   int
	file   *os.File // epfd, registered with the netpoller
	sys    syscall.RawConn
	mu     sync.Mutex
	conns  map[uint64]*atomic.Bool
	next   uint64
	done   chan struct{}
	closed bool
}

func newCloseWatcher() *closeWatcher {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil // fall back to peeking (conn.reusable)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil
	}
	file := os.NewFile(uintptr(epfd), "rollprobe-closewatch")
	sys, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return nil
	}
	w := &closeWatcher{epfd: epfd, file: file, sys: sys, conns: map[uint64]*atomic.Bool{}, done: make(chan struct{})}
	go w.loop()
	return w
}

const epollRDHUP = 0x2000 // EPOLLRDHUP, not in package syscall

// watch registers fd; flag is set when the peer closes or the socket fails.
// It returns a token for unwatch, or 0 if the fd could not be registered.
func (w *closeWatcher) watch(fd int, flag *atomic.Bool) uint64 {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return 0
	}
	w.next++
	token := w.next
	w.conns[token] = flag
	w.mu.Unlock()
	ev := syscall.EpollEvent{Events: epollRDHUP}
	*(*uint64)(unsafe.Pointer(&ev.Fd)) = token
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		w.unwatch(token)
		return 0
	}
	return token
}

// unwatch forgets token. The kernel drops the registration itself when the
// socket is closed; an event already in flight finds no entry and is ignored.
func (w *closeWatcher) unwatch(token uint64) {
	if token == 0 {
		return
	}
	w.mu.Lock()
	delete(w.conns, token)
	w.mu.Unlock()
}

func (w *closeWatcher) loop() {
	defer close(w.done)
	events := make([]syscall.EpollEvent, 64)
	var n int
	drain := func(fd uintptr) bool {
		var err error
		n, err = syscall.EpollWait(int(fd), events, 0)
		return n > 0 || (err != nil && err != syscall.EINTR)
	}
	for {
		// Read waits on the netpoller until the epoll set has events, and
		// fails once the file is closed.
		if err := w.sys.Read(drain); err != nil {
			return
		}
		w.mu.Lock()
		for _, ev := range events[:max(n, 0)] {
			token := *(*uint64)(unsafe.Pointer(&ev.Fd))
			if flag := w.conns[token]; flag != nil {
				flag.Store(true)
			}
		}
		w.mu.Unlock()
	}
}

// close stops the watcher and releases its epoll set.
func (w *closeWatcher) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	_ = w.file.Close()
	<-w.done
}
