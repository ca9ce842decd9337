// Command floor is the least a client can do to send HTTP requests on
// fresh connections at a fixed rate on Linux: one goroutine, one epoll set,
// raw system calls, no classification, no recording, a response taken as
// complete when its bytes end in the body nginx's `return 200 "ok\n"`
// sends. bench/bench.sh runs it beside rollprobe and fortio to show what
// one fresh connection costs the kernel whoever makes it, and what
// rollprobe's evidence adds (-evidence: bind before connect and
// getsockname, as rollprobe does to know a failed connect's source port;
// -finwait: wait for the server's FIN, so TIME_WAIT stays on the server).
//
// It parks as rollprobe's event loops do (on Go's netpoller, the epoll
// descriptor being readable) so that it pays the same runtime costs; it is
// a measuring stick, not a client to use.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// Epoll bits as epoll(7) names them (package syscall's EPOLLET is negative).
const (
	epollRDHUP = 0x2000 // the peer closed its side (its FIN is in)
	epollET    = 1 << 31
)

// drainFor bounds the wait, once the sending window is over, for answers
// and FINs still to come: a server that never answers cannot keep the
// floor running (what is left then counts as failed).
const drainFor = 5 * time.Second

type conn struct {
	fd      int
	reading bool // connected and the request sent
	done    bool // the response is in: waiting for the FIN
}

func main() {
	target := flag.String("target", "127.0.0.1:18090", "the server's IPv4 address and port")
	rate := flag.Float64("rate", 3000, "new connections (requests) per second")
	dur := flag.Duration("duration", 10*time.Second, "how long to send")
	evidence := flag.Bool("evidence", true, "bind and getsockname before connect (rollprobe's evidence)")
	finwait := flag.Bool("finwait", true, "wait for the server's FIN before closing")
	flag.Parse()
	ap, err := netip.ParseAddrPort(*target)
	if err != nil || !ap.Addr().Is4() || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "floor: want -target IPv4:port and a positive -rate")
		os.Exit(2)
	}
	sent, answered, failed, err := run(ap, *rate, *dur, *evidence, *finwait)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	fmt.Printf("sent %d answered %d failed %d\n", sent, answered, failed)
}

func run(ap netip.AddrPort, rate float64, dur time.Duration, evidence, finwait bool) (sent, answered, failed int, err error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := syscall.SetNonblock(ep, true); err != nil {
		return 0, 0, 0, err
	}
	epf := os.NewFile(uintptr(ep), "floor-epoll")
	defer epf.Close()
	raw, err := epf.SyscallConn()
	if err != nil {
		return 0, 0, 0, err
	}
	sa := &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	req := []byte("GET / HTTP/1.1\r\nHost: " + ap.String() + "\r\nConnection: close\r\nX-Request-Id: floor\r\n\r\n")
	conns := map[int32]*conn{}
	buf := make([]byte, 64<<10)
	events := make([]syscall.EpollEvent, 256)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	closeConn := func(c *conn) {
		_ = syscall.Close(c.fd)
		delete(conns, int32(c.fd))
	}
	for {
		now := time.Since(start)
		for now < dur && time.Duration(sent)*interval <= now {
			sent++
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				failed++
				continue
			}
			if evidence {
				_ = syscall.Bind(fd, &syscall.SockaddrInet4{})
				_, _ = syscall.Getsockname(fd)
			}
			if err := syscall.Connect(fd, sa); err != nil && err != syscall.EINPROGRESS {
				failed++
				_ = syscall.Close(fd)
				continue
			}
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | epollRDHUP | epollET, Fd: int32(fd)}
			if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
				return sent, answered, failed, err
			}
			conns[int32(fd)] = &conn{fd: fd}
		}
		if now >= dur && len(conns) == 0 {
			return sent, answered, failed, nil
		}
		if now >= dur+drainFor {
			for _, c := range conns {
				if !c.done { // answered already: only its FIN is missing
					failed++
				}
				closeConn(c)
			}
			return sent, answered, failed, nil
		}
		n, _ := syscall.EpollWait(ep, events, 0)
		if n <= 0 {
			wake := start.Add(time.Duration(sent) * interval)
			if now >= dur {
				wake = time.Now().Add(100 * time.Millisecond)
			}
			_ = epf.SetReadDeadline(wake)
			_ = raw.Read(func(fd uintptr) bool {
				n, _ = syscall.EpollWait(int(fd), events, 0)
				return n > 0
			})
		}
		for _, ev := range events[:max(n, 0)] {
			c := conns[ev.Fd]
			if c == nil {
				continue
			}
			switch {
			case !c.reading:
				if v, _ := syscall.GetsockoptInt(c.fd, syscall.SOL_SOCKET, syscall.SO_ERROR); v != 0 {
					failed++
					closeConn(c)
					continue
				}
				if _, err := syscall.Write(c.fd, req); err != nil {
					failed++
					closeConn(c)
					continue
				}
				c.reading = true
			case c.done:
				closeConn(c) // the FIN (or an error)
			default:
				m, err := syscall.Read(c.fd, buf)
				if err == syscall.EAGAIN {
					continue
				}
				if err != nil || m == 0 || !bytes.HasSuffix(buf[:m], []byte("\r\n\r\nok\n")) {
					failed++
					closeConn(c)
					continue
				}
				answered++
				if !finwait || ev.Events&epollRDHUP != 0 {
					closeConn(c)
					continue
				}
				c.done = true
			}
		}
	}
}
