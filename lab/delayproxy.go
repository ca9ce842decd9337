package lab

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// DelayProxy is a TCP proxy that delivers everything the upstream sends
// Delay later, preserving order. Put between kube-proxy and the apiserver it
// makes kube-proxy see every EndpointSlice change late, as an overloaded
// cluster does, so the propagation lag that drops requests at a rollout is
// reproducible. It works on the TLS stream as it is: bytes are delayed, not
// decoded.
type DelayProxy struct {
	Listen   string
	Upstream string
	Delay    time.Duration
}

// Serve accepts connections until ctx ends.
func (p *DelayProxy) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", p.Listen)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go p.handle(ctx, c)
	}
}

type chunk struct {
	due  time.Time
	data []byte
}

func (p *DelayProxy) handle(ctx context.Context, client net.Conn) {
	defer client.Close()
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", p.Upstream)
	if err != nil {
		return
	}
	defer up.Close()
	var once sync.Once
	done := make(chan struct{})
	stop := func() { once.Do(func() { close(done) }) }

	// Client to upstream: immediate (requests are not what lags).
	go func() {
		_, _ = io.Copy(up, client)
		stop()
	}()
	// Upstream to client: through the delay line.
	line := make(chan chunk, 4096)
	go func() {
		defer close(line)
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				select {
				case line <- chunk{due: time.Now().Add(p.Delay), data: append([]byte(nil), buf[:n]...)}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range line {
		select {
		case <-time.After(time.Until(c.due)):
		case <-done:
			return
		case <-ctx.Done():
			return
		}
		if _, err := client.Write(c.data); err != nil {
			return
		}
	}
}
