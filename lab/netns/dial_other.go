//go:build !linux

package netns

import (
	"context"
	"errors"
	"net"
)

// DialContextIn needs Linux network namespaces: elsewhere every dial fails
// (the lab runs on Linux only; this keeps the rest of rollprobe building).
func DialContextIn(string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("the lab's network namespaces need Linux")
	}
}
