package main

import (
	"net"
	"sync"
	"time"
)

// delayListener emulates a long link (the lab has no netem): every byte
// a connection writes reaches the peer delay later, in order, as over a
// WAN. What it shows is the one thing such a link changes at shutdown: a
// single GOAWAY reaches the client late, and the streams it sent meanwhile
// are above the GOAWAY's last stream, never processed; a graceful
// two-phase GOAWAY leaves none behind however long the link.
type delayListener struct {
	net.Listener
	delay time.Duration
}

func (l delayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	d := &delayConn{Conn: c, delay: l.delay, queue: make(chan delayed, 1024)}
	go d.deliver()
	return d, nil
}

type delayed struct {
	due time.Time
	b   []byte
}

// delayConn queues its writes (as a socket buffer holds them) and a
// goroutine sends each when due. Close sends what is queued first.
type delayConn struct {
	net.Conn
	delay     time.Duration
	queue     chan delayed
	closeOnce sync.Once
	mu        sync.Mutex
	closed    bool
}

func (c *delayConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.queue <- delayed{time.Now().Add(c.delay), append([]byte(nil), p...)}
	return len(p), nil
}

func (c *delayConn) deliver() {
	for d := range c.queue {
		time.Sleep(time.Until(d.due))
		if _, err := c.Conn.Write(d.b); err != nil {
			break
		}
	}
	_ = c.Conn.Close()
	for range c.queue { // a failed write: drop the rest
	}
}

func (c *delayConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		close(c.queue)
		c.mu.Unlock()
	})
	return nil
}
