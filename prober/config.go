package prober

import (
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/internal/field"
)

// ConnMode says how requests use connections.
type ConnMode struct {
	// FreshFraction is the fraction of requests sent on a new connection
	// (with Connection: close); the rest reuse a kept-alive connection.
	// 1 is "new", 0 is "keepalive".
	FreshFraction float64
}

// ParseConnMode parses "new", "keepalive" or "mixed=F" (0 <= F <= 1).
func ParseConnMode(s string) (ConnMode, error) {
	switch {
	case s == "new":
		return ConnMode{FreshFraction: 1}, nil
	case s == "keepalive":
		return ConnMode{FreshFraction: 0}, nil
	case strings.HasPrefix(s, "mixed="):
		f, err := strconv.ParseFloat(strings.TrimPrefix(s, "mixed="), 64)
		if err != nil || !(f >= 0 && f <= 1) { // NaN fails both comparisons
			return ConnMode{}, field.Invalid("Conn", strconv.Quote(s), "the fraction of fresh connections must be a number from 0 to 1")
		}
		return ConnMode{FreshFraction: f}, nil
	}
	return ConnMode{}, field.Invalid("Conn", strconv.Quote(s), "want new, keepalive or mixed=F")
}

func (m ConnMode) String() string {
	switch m.FreshFraction {
	case 1:
		return "new"
	case 0:
		return "keepalive"
	}
	return "mixed=" + strconv.FormatFloat(m.FreshFraction, 'g', -1, 64)
}

// StatusSet is a set of HTTP status codes given as ranges.
type StatusSet []StatusRange

// StatusRange is an inclusive range of status codes.
type StatusRange struct{ Lo, Hi int }

// ParseStatusSet parses "200-399", "200,204" or "200-299,304".
func ParseStatusSet(s string) (StatusSet, error) {
	var set StatusSet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(lo)
		b := a
		var errB error
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		if errA != nil || errB != nil || a < 100 || b > 999 || a > b {
			return nil, field.Invalid("ExpectStatus", strconv.Quote(s), "want codes or ranges from 100 to 999, like 200-399 or 200,204")
		}
		set = append(set, StatusRange{a, b})
	}
	return set, nil
}

// Contains reports whether code is in the set.
func (s StatusSet) Contains(code int) bool {
	for _, r := range s {
		if code >= r.Lo && code <= r.Hi {
			return true
		}
	}
	return false
}

func (s StatusSet) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		if r.Lo == r.Hi {
			parts[i] = strconv.Itoa(r.Lo)
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r.Lo, r.Hi)
		}
	}
	return strings.Join(parts, ",")
}

// Config is everything a probe run needs. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	Target *url.URL
	Method string
	Header http.Header
	Body   []byte

	// Rate > 0: open model, Rate requests per second at intended times.
	// Rate == 0: closed model, Concurrency workers back to back.
	Rate        float64
	Duration    time.Duration // 0: until the context is cancelled
	Concurrency int           // closed model workers
	// TuneProcs, closed model only: when above 1, Run chooses GOMAXPROCS
	// between 1 and TuneProcs by measuring the rate (see procTuner); 0
	// leaves GOMAXPROCS as it is.
	TuneProcs  int
	Workers    int // open model: workers to start with
	MaxWorkers int // open model: upper bound when falling behind

	// resolver, when set, resolves the target's name (tests: a name with
	// the addresses they choose); nil is the system's.
	resolver *net.Resolver

	Conn           ConnMode
	Timeout        time.Duration // whole request, connect included
	ConnectTimeout time.Duration
	Insecure       bool // skip TLS certificate verification
	// CACert holds PEM certificates an https target's certificate must
	// chain to, instead of the system's roots (a private CA: an ingress's
	// own, a mesh's). Empty: the system's roots.
	CACert []byte
	// ConnectTo, "IP:PORT", is where every connection goes instead of the
	// target's host and port, which still name the Host header and the TLS
	// server name: one ingress replica, node or load balancer probed as
	// the name users take (curl's --connect-to ::IP:PORT).
	ConnectTo string

	ExpectStatus    StatusSet
	BackendHeader   string // response header identifying the serving backend
	RequestIDHeader string
	// SecretParams names query parameters whose values are credentials,
	// besides the usual ones (SecretParams): sent, never shown or stored.
	SecretParams []string

	// KeepFailures is how many failures are kept in full; later ones are
	// only counted, so memory stays flat on long runs.
	KeepFailures int

	// Engine chooses how requests are driven (EngineAuto: the event loops
	// where they can serve the target, else goroutines).
	Engine Engine

	// Protocol is what is spoken to the target (HTTP1 by default).
	Protocol Protocol
	// GRPCMethod, for GRPC, is the method called, "package.Service/Method";
	// Body is its request message, protobuf-encoded (empty by default).
	GRPCMethod string
	// GRPCClient, for GRPC, is who makes the calls (GRPCClientRaw by
	// default).
	GRPCClient GRPCClient
	// Connections, for a multiplexed protocol (h2) with long-lived
	// connections, is how many the run keeps: requests take them in
	// turn, as many streams at once on each as are in flight.
	Connections int
	// Streams, for a multiplexed protocol, caps the streams in flight on
	// one connection (h2load's -m); 0 leaves it to the server's
	// SETTINGS_MAX_CONCURRENT_STREAMS. A request finding every connection
	// full waits, its wait counted in its latency.
	Streams int

	// ConnLog, when set, gets a record of every connection that carried
	// a response (see ConnLog): the run reads it with conntrack's table.
	// Not with GRPCClientGo (grpc-go owns those connections).
	ConnLog *ConnLog
}

// Engine names the prober's engine. Both record the same outcome for the
// same exchange; they differ in cost.
type Engine string

const (
	// EngineAuto: the event loops for an http:// target given by IP
	// address on Linux, else the goroutines.
	EngineAuto Engine = ""
	// EngineLoops: one event loop per P over non-blocking sockets
	// (loop_linux.go): the cheaper engine.
	EngineLoops Engine = "loops"
	// EngineGoroutines: a goroutine per request in flight on Go's net
	// package: TLS, names resolved per connection, every platform.
	EngineGoroutines Engine = "goroutines"
)

// ParseEngine parses "auto", "loops" or "goroutines".
func ParseEngine(s string) (Engine, error) {
	switch Engine(s) {
	case "auto", EngineAuto:
		return EngineAuto, nil
	case EngineLoops, EngineGoroutines:
		return Engine(s), nil
	}
	return "", field.Invalid("Engine", strconv.Quote(s), "want auto, loops or goroutines")
}

// Defaults. A 5 s request timeout: during a rollout a request that takes
// longer than that has been dropped for any user that matters.
const (
	DefaultRate            = 200
	DefaultTimeout         = 5 * time.Second
	DefaultConnectTimeout  = 2 * time.Second
	DefaultWorkers         = 10
	DefaultMaxWorkers      = 2000
	DefaultConcurrency     = 10
	DefaultKeepFailures    = 10000
	DefaultRequestIDHeader = "X-Request-Id"
	DefaultExpectStatus    = "200-399"
)

// DefaultConfig returns a Config with every default filled in but no target.
func DefaultConfig() Config {
	expect, _ := ParseStatusSet(DefaultExpectStatus)
	return Config{
		Method:          http.MethodGet,
		Header:          http.Header{},
		Rate:            DefaultRate,
		Duration:        10 * time.Second,
		Concurrency:     DefaultConcurrency,
		Workers:         DefaultWorkers,
		MaxWorkers:      DefaultMaxWorkers,
		Conn:            ConnMode{FreshFraction: 0},
		Timeout:         DefaultTimeout,
		ConnectTimeout:  DefaultConnectTimeout,
		ExpectStatus:    expect,
		RequestIDHeader: DefaultRequestIDHeader,
		KeepFailures:    DefaultKeepFailures,
		Protocol:        HTTP1,
		GRPCMethod:      DefaultGRPCMethod,
		GRPCClient:      GRPCClientRaw,
		Connections:     DefaultConnections,
	}
}

// ParseTarget checks that raw is an absolute http or https URL with a
// host and, if it names one, a port from 1 to 65535.
func ParseTarget(raw string) (*url.URL, error) {
	bad := func(problem string) (*url.URL, error) {
		return nil, field.Invalid("Target", strconv.Quote(RedactURL(raw)), problem)
	}
	if !strings.Contains(raw, "://") {
		return bad("want an absolute URL with its scheme, like http://" + strings.TrimPrefix(raw, "//"))
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return bad(err.Error())
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("want an http:// or https:// URL")
	}
	if u.Hostname() == "" {
		return bad("no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad("port " + p + " is not a TCP port (1 to 65535)")
		}
	}
	return u, nil
}

// userinfo matches the credentials of a URL (scheme://user:password@).
var userinfo = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*://[^/@:]*):[^/@]*@`)

// RedactURL shows a URL as it may be logged or stored (RedactTarget with
// the default secret parameters), even a string that does not parse.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if r := RedactTarget(u, nil); r != u.String() {
			return r
		}
		return raw // nothing to hide: as given ("http://" would print as "http:")
	}
	return userinfo.ReplaceAllString(raw, "${1}:xxxxx@")
}

// SecretParams are the query parameters whose values are credentials in
// the URLs people probe (API tokens, signed URLs' signatures); matched
// without regard to case. Config.SecretParams adds more.
var SecretParams = []string{"token", "access_token", "id_token", "refresh_token", "auth", "authorization",
	"key", "api_key", "apikey", "api-key", "secret", "client_secret", "password", "passwd", "pwd",
	"sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
	"x-goog-credential", "code", "session", "sessionid"}

// RedactTarget shows u as it may be logged or stored, while the requests
// still carry everything: a password becomes xxxxx (url.URL.Redacted's
// form), so does a user without a password (a token passed as
// http://TOKEN@host/), and so does the value of each query parameter named
// in SecretParams or extra. Everything else is shown as given.
func RedactTarget(u *url.URL, extra []string) string {
	if u == nil {
		return ""
	}
	r := *u
	if r.User != nil {
		if _, has := r.User.Password(); has {
			r.User = url.UserPassword(r.User.Username(), "xxxxx")
		} else if r.User.Username() != "" {
			r.User = url.User("xxxxx")
		}
	}
	if r.RawQuery != "" {
		r.RawQuery = redactQuery(r.RawQuery, extra)
	}
	return r.String()
}

// redactQuery replaces secret parameters' values in a raw query, keeping
// the rest byte for byte (order, encoding, parameters without a value).
func redactQuery(raw string, extra []string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if !hasValue {
			continue
		}
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if isSecretParam(name, extra) {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + "xxxxx"
		}
	}
	return strings.Join(parts, "&")
}

func isSecretParam(name string, extra []string) bool {
	for _, s := range SecretParams {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	for _, s := range extra {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}

// RedactedTarget is the target as it may be shown and stored
// (RedactTarget with the configured secret parameters).
func (c *Config) RedactedTarget() string { return RedactTarget(c.Target, c.SecretParams) }

// validToken reports whether s is an HTTP token (RFC 9110 5.6.2): what a
// method and a header name must be. Anything else (a space, CR, LF) would
// change the request's framing.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// validHeaderValue: no control character but horizontal tab (RFC 9110 5.5).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// Validate reports every problem with c as field errors (internal/field):
// the Go field's name, which the command renames to its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(name string, value any, problem string) { errs = append(errs, field.Invalid(name, value, problem)) }
	if c.Target == nil {
		errs = append(errs, field.Missing("Target", "no target URL"))
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		bad("Rate", c.Rate, "must be a finite number, 0 (closed model) or more")
	}
	if !validToken(c.Method) {
		bad("Method", strconv.Quote(c.Method), "not an HTTP method (a token: letters, digits and !#$%&'*+-.^_`|~, no space or line break)")
	}
	if c.Rate == 0 && c.Concurrency < 1 {
		bad("Concurrency", c.Concurrency, "the closed model (rate 0) needs at least 1 worker")
	}
	if c.Rate > 0 && c.Workers < 1 {
		bad("Workers", c.Workers, "need at least 1")
	}
	if c.Rate > 0 && c.MaxWorkers < c.Workers {
		bad("MaxWorkers", c.MaxWorkers, fmt.Sprintf("must be at least the starting workers (%d)", c.Workers))
	}
	if c.Duration < 0 {
		bad("Duration", c.Duration, "must not be negative")
	}
	if c.Timeout <= 0 {
		bad("Timeout", c.Timeout, "must be positive")
	}
	if c.ConnectTimeout <= 0 {
		bad("ConnectTimeout", c.ConnectTimeout, "must be positive")
	}
	if len(c.ExpectStatus) == 0 {
		errs = append(errs, field.Missing("ExpectStatus", "empty set"))
	}
	switch c.Engine {
	case EngineAuto, EngineGoroutines:
	case EngineLoops:
		if _, why := loopTarget(c); why != "" && c.Target != nil {
			bad("Engine", string(c.Engine), "the event-loop engine cannot serve this target: "+why)
		}
	default:
		bad("Engine", strconv.Quote(string(c.Engine)), "want auto, loops or goroutines")
	}
	switch c.Protocol {
	case HTTP1:
	case H2, GRPC:
		if why := loopH2Refusal(c); why != "" && c.Engine == EngineLoops {
			bad("Engine", string(c.Engine), "the event-loop engine cannot serve this run: "+why)
		}
		if c.Connections < 1 {
			bad("Connections", c.Connections, "need at least 1")
		}
		if c.Streams < 0 {
			bad("Streams", c.Streams, "must not be negative (0: as many as the server allows)")
		}
		if c.Streams > 0 && c.GRPCClient == GRPCClientGo {
			bad("Streams", c.Streams, "grpc-go follows the server's limit only")
		}
		// The body goes in one DATA frame within the initial stream
		// window (RFC 9113 §6.9.2), so the prober never waits on flow
		// control to send.
		limit := h2MaxBody
		if c.Protocol == GRPC {
			limit -= grpcPrefix
		}
		if len(c.Body) > limit {
			bad("Body", len(c.Body), fmt.Sprintf("an %s request body is at most %d bytes (one frame within the initial window)", c.Protocol, limit))
		}
		if c.Protocol == GRPC {
			if !validGRPCMethod(c.GRPCMethod) {
				bad("GRPCMethod", strconv.Quote(c.GRPCMethod), "want package.Service/Method, like grpc.health.v1.Health/Check")
			}
			if c.Target != nil && c.Target.RequestURI() != "/" {
				bad("Target", c.RedactedTarget(), "a gRPC target names the scheme, host and port only: the method is named apart from the URL")
			}
		}
		switch c.GRPCClient {
		case GRPCClientRaw, "":
		case GRPCClientGo:
			if c.Protocol != GRPC {
				bad("GRPCClient", string(c.GRPCClient), "grpc-go makes gRPC calls only (--protocol grpc)")
			}
			if c.Conn.FreshFraction > 0 {
				bad("GRPCClient", string(c.GRPCClient), "grpc-go keeps its connections: not with new connections per request")
			}
		default:
			bad("GRPCClient", strconv.Quote(string(c.GRPCClient)), "want raw or grpc-go")
		}
		for name, values := range c.Header {
			if h2ConnectionHeader(name) || (strings.EqualFold(name, "TE") && (len(values) != 1 || values[0] != "trailers")) {
				bad("Header", name, "a connection-specific header, not allowed in HTTP/2 (RFC 9113 §8.2.2; TE only as \"trailers\")")
			}
		}
	default:
		bad("Protocol", strconv.Quote(string(c.Protocol)), "want http1, h2 or grpc")
	}
	if c.KeepFailures < 0 {
		bad("KeepFailures", c.KeepFailures, "must not be negative")
	}
	if c.ConnectTo != "" {
		if ap, err := netip.ParseAddrPort(c.ConnectTo); err != nil || ap.Port() == 0 {
			bad("ConnectTo", strconv.Quote(c.ConnectTo), "want IP:PORT (an IPv6 address in brackets), like 10.0.0.7:443")
		}
	}
	if len(c.CACert) > 0 {
		switch {
		case c.Insecure:
			bad("CACert", "given", "a CA to verify with and no verification (Insecure): choose one")
		case c.Target != nil && c.Target.Scheme != "https":
			bad("CACert", "given", "the target is "+c.Target.Scheme+"://: only an https target has a certificate to verify")
		case !x509.NewCertPool().AppendCertsFromPEM(c.CACert):
			bad("CACert", "given", "no PEM certificate in it")
		}
	}
	// These two name headers on the wire: anything but a token (a line
	// break, a colon, a space) would add header lines or break framing.
	if c.RequestIDHeader != "" && !validToken(c.RequestIDHeader) {
		bad("RequestIDHeader", strconv.Quote(c.RequestIDHeader), "not a header name (a token: letters, digits and !#$%&'*+-.^_`|~, no space, colon or line break)")
	}
	if c.BackendHeader != "" && !validToken(c.BackendHeader) {
		bad("BackendHeader", strconv.Quote(c.BackendHeader), "not a header name (a token: letters, digits and !#$%&'*+-.^_`|~, no space, colon or line break)")
	}
	for name, values := range c.Header {
		if !validToken(name) {
			bad("Header", strconv.Quote(name), "not a header name (a token, no space or line break)")
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				bad("Header", strconv.Quote(name+": "+v), "a header value cannot hold a line break or a control character")
			}
		}
		if strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Connection") ||
			strings.EqualFold(name, "Transfer-Encoding") {
			bad("Header", name, "set by the prober itself (from the connection mode and the body)")
		}
	}
	return errors.Join(errs...)
}

// URLPort is u's port, or its scheme's default (443 for https, else 80):
// the one rule for a URL's port.
func URLPort(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// DialedPort is the port every connection goes to: ConnectTo's when set,
// else the target's; 0 without a target.
func (c *Config) DialedPort() uint16 {
	if ap, err := netip.ParseAddrPort(c.ConnectTo); err == nil {
		return ap.Port()
	}
	if c.Target == nil {
		return 0
	}
	return uint16(URLPort(c.Target))
}
