package prober

import (
	"strconv"
	"strings"

	"github.com/rollprobe/rollprobe/internal/field"
)

// Protocol is what the prober speaks to the target. Every protocol ends
// each attempt in the same Result; the recorder, the report and the
// analysis never branch on it.
type Protocol string

const (
	// HTTP1 is HTTP/1.1 (ALPN http/1.1 on https), the default.
	HTTP1 Protocol = "http1"
	// H2 is HTTP/2: ALPN h2 on https, prior knowledge (h2c) on http.
	H2 Protocol = "h2"
)

// ParseProtocol parses "http1" or "h2" ("" is http1).
func ParseProtocol(s string) (Protocol, error) {
	switch Protocol(s) {
	case "", HTTP1:
		return HTTP1, nil
	case H2:
		return H2, nil
	}
	return "", field.Invalid("Protocol", strconv.Quote(s), "want http1 or h2")
}

// multiplexed: the protocol carries many requests at once on one
// connection, so connections are a pool of their own (Config.Connections)
// instead of one per request in flight.
func (p Protocol) multiplexed() bool { return p == H2 }

// DefaultConnections is how many connections an h2 run keeps open when
// --conn keepalive: enough that the requests spread over the Service's
// pods (each connection is pinned to the pod its SYN was sent to), few
// enough to be what one client process holds.
const DefaultConnections = 10

// h2MaxBody is the largest request body an h2 request sends: one DATA
// frame (16,384 bytes, the smallest SETTINGS_MAX_FRAME_SIZE a server may
// set) within the initial stream window (65,535).
const h2MaxBody = 16384

// h2ConnectionHeader: a header HTTP/2 forbids in requests (RFC 9113
// §8.2.2); Validate refuses it rather than send a malformed request.
func h2ConnectionHeader(name string) bool {
	switch strings.ToLower(name) {
	case "keep-alive", "proxy-connection", "upgrade":
		return true
	}
	return false
}
