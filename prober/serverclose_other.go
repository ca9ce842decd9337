//go:build !linux

package prober

import "net"

// serverCloseOf needs Linux's TCP_INFO byte counters.
func serverCloseOf(net.Conn) ServerClose { return CloseUnknown }
