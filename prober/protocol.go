package prober

import (
	"strconv"
	"strings"

	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/report"
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
	// GRPC is a unary gRPC call (Config.GRPCMethod) over HTTP/2, TLS or
	// cleartext by the target's scheme, on the same streams as H2.
	GRPC Protocol = "grpc"
)

// ParseProtocol parses "http1", "h2" or "grpc" ("" is http1).
func ParseProtocol(s string) (Protocol, error) {
	switch Protocol(s) {
	case "", HTTP1:
		return HTTP1, nil
	case H2, GRPC:
		return Protocol(s), nil
	}
	return "", field.Invalid("Protocol", strconv.Quote(s), "want http1, h2 or grpc")
}

// Multiplexed: the protocol carries many requests at once on one
// connection (HTTP/2 and gRPC), so connections are a pool of their own
// (Config.Connections) instead of one per request in flight.
func (p Protocol) Multiplexed() bool { return p == H2 || p == GRPC }

// GRPCClient is who makes the calls of a gRPC run.
type GRPCClient string

const (
	// GRPCClientRaw: rollprobe's own streams, every attempt counted (the
	// default).
	GRPCClientRaw GRPCClient = report.GRPCClientRaw
	// GRPCClientGo: grpc-go itself, as a Go service's clients call; what
	// it resends on its own is counted as hidden retries.
	GRPCClientGo GRPCClient = report.GRPCClientGo
)

// DefaultGRPCMethod is the standard health check every gRPC server can
// serve (grpc.health.v1); its empty request asks for the whole server.
const DefaultGRPCMethod = "grpc.health.v1.Health/Check"

// validGRPCMethod: "package.Service/Method", as the :path after its
// leading slash.
func validGRPCMethod(m string) bool {
	svc, method, ok := strings.Cut(m, "/")
	return ok && svc != "" && method != "" && !strings.ContainsAny(method, "/ ") && !strings.ContainsAny(svc, " ") &&
		validHeaderValue(m)
}

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

// grpcPrefix is the length of a gRPC message's prefix: a compressed flag
// and a 4-byte length.
const grpcPrefix = 5

// grpcCodes are the gRPC status codes' names (google.golang.org/grpc/codes;
// the numbers are the protocol's).
var grpcCodes = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
	"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
	"UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// grpcInternal is INTERNAL's code: what a response without a grpc-status
// is, as gRPC clients report it.
const grpcInternal = 13

// GRPCCodeName is the name of gRPC status code c ("CODE_17" beyond the
// known ones).
func GRPCCodeName(c int) string {
	if c >= 0 && c < len(grpcCodes) {
		return grpcCodes[c]
	}
	return "CODE_" + strconv.Itoa(c)
}
