//go:build !linux

package prober

import (
	"errors"
	"net/netip"
)

// The event-loop engine is Linux-only (epoll); elsewhere the goroutine
// engine runs.

func loopTarget(*Config) (netip.AddrPort, string) {
	return netip.AddrPort{}, "the event-loop engine runs on Linux only"
}

type loopEngine struct{}

func startLoops(*Prober, netip.AddrPort, int) (*loopEngine, error) {
	return nil, errors.New("the event-loop engine runs on Linux only")
}

func (*loopEngine) setProcs(n int) int { return n }
func (*loopEngine) wake()              {}
func (*loopEngine) workers() int       { return 0 }
func (*loopEngine) release()           {}
