package prober

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/rollprobe/rollprobe/report"
)

// The grpc-go client mode (GRPCClientGo). The raw mode counts every
// stream; this one makes the same calls through grpc-go itself, as a Go
// service's clients do, and counts what grpc-go did on its own: the
// transparent retries of streams a GOAWAY left unprocessed or the server
// refused (grpc-go resends those whatever the retry policy). Side by side
// (--grpc-client both), the raw mode's failures that this mode turns into
// successes with hidden retries are what real clients only pay for in
// latency; the ones left are what they see.

// grpcGoPool is Config.Connections grpc-go ClientConns, taken in turn;
// each keeps one HTTP/2 connection (pick_first to the one address) and
// reconnects as grpc-go does.
type grpcGoPool struct {
	conns []*grpc.ClientConn
	next  atomic.Uint32
	// log is the run's connection log (Config.ConnLog), nil when it keeps
	// none. dialled holds every connection grpc-go dialled, by its local
	// address: a call's OutHeader names its connection by that, and the
	// call's outcome reads it (its responses counted, its GOAWAY seen),
	// after the connection has ended too.
	log     *ConnLog
	dialled sync.Map // netip.AddrPort -> *grpcConn
	// linger is how long an ended connection stays in dialled: longer
	// than a call cut by its end takes to return and be read.
	linger time.Duration
	// cleartext: connections carry h2c, whose frames the pool reads as
	// they come off the socket; a TLS connection's are read as they come
	// out of TLS (framedTLS).
	cleartext bool
}

// grpcConn is a connection grpc-go dialled through the pool: it counts the
// responses its calls got and notes itself in the run's connection log
// when it ends, as the other engines' connections do, so conntrack's
// record of where it went says which pod served them. On h2c it reads the
// server's frame headers as grpc-go reads them, for the GOAWAYs (over TLS
// the TLS connection above it reads them into frames).
type grpcConn struct {
	net.Conn
	pool              *grpcGoPool
	addr              ConnAddr
	dialed, connected time.Duration
	responses         atomic.Uint32
	calls             atomic.Uint32 // attempts sent on it
	// ended: a read from it failed (the server's FIN or a reset), or it
	// was closed. Set before grpc-go sees the error, so before a call it
	// cuts returns.
	ended  atomic.Bool
	noted  sync.Once
	frames *h2FrameWatch
}

// Read passes what the server sent to grpc-go, an h2c connection's frames
// watched first.
func (c *grpcConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.pool.cleartext && n > 0 {
		c.frames.scan(b[:n])
	}
	if err != nil {
		c.ended.Store(true)
	}
	return n, err
}

// framedTLS is TLS credentials whose connections the pool reads frame by
// frame once decrypted, as it reads h2c's: a call cut on one says which
// GOAWAY came before, over TLS as in cleartext. Its handshakes name the
// server the other clients name (serverName: the target's host), not the
// :authority's host, which grpc-go would name (a Host header's, say).
type framedTLS struct {
	credentials.TransportCredentials
	serverName string
}

func (f framedTLS) ClientHandshake(ctx context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := f.TransportCredentials.ClientHandshake(ctx, f.serverName, raw)
	if c, ok := raw.(*grpcConn); ok && err == nil {
		return &framedConn{Conn: conn, frames: c.frames, under: c}, info, nil
	}
	return conn, info, err
}

func (f framedTLS) Clone() credentials.TransportCredentials {
	return framedTLS{f.TransportCredentials.Clone(), f.serverName}
}

// framedConn is a TLS connection of the pool's: what grpc-go reads from it
// is scanned for frames on the way. Closing it closes the grpcConn below.
type framedConn struct {
	net.Conn
	frames *h2FrameWatch
	under  *grpcConn
}

func (c *framedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.frames.scan(b[:n])
	}
	if err != nil {
		c.under.ended.Store(true) // a close_notify ends it before the socket does
	}
	return n, err
}

// Close ends the connection and notes it (once, whoever closes it first).
func (c *grpcConn) Close() error {
	c.ended.Store(true)
	c.noted.Do(func() {
		c.pool.log.Note(c.addr, c.dialed, c.connected, c.responses.Load())
		// Not kept for the whole run: a server that ends connections
		// often (MaxConnectionAge) would make it grow with them.
		time.AfterFunc(c.pool.linger, func() { c.pool.dialled.CompareAndDelete(c.addr.Local, c) })
	})
	return c.Conn.Close()
}

// h2FrameWatch reads the frame headers of a server's side of an HTTP/2
// connection (RFC 9113 §4.1: 9 bytes, then the payload it skips) for its
// GOAWAYs: the kind the raw client would name (h2GoAway.note).
type h2FrameWatch struct {
	mu      sync.Mutex
	hdr     [9]byte
	nhdr    int // bytes of hdr read
	skip    int // payload bytes still to pass over
	goAway  bool
	last    [4]byte // a GOAWAY's last stream ID, as it comes
	nlast   int
	kind    GoAwayKind
	goAways int
}

// scan takes in the next bytes the server sent.
func (w *h2FrameWatch) scan(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) > 0 {
		if w.skip > 0 {
			n := min(w.skip, len(b))
			if w.goAway {
				for _, x := range b[:min(n, 4-w.nlast)] {
					w.last[w.nlast] = x
					w.nlast++
				}
				if w.nlast == 4 {
					w.noteGoAway()
				}
			}
			w.skip -= n
			b = b[n:]
			continue
		}
		n := copy(w.hdr[w.nhdr:], b)
		w.nhdr += n
		b = b[n:]
		if w.nhdr < 9 {
			return
		}
		w.nhdr = 0
		w.skip = int(w.hdr[0])<<16 | int(w.hdr[1])<<8 | int(w.hdr[2])
		w.goAway, w.nlast = w.hdr[3] == 0x7, 0 // GOAWAY
	}
}

// noteGoAway notes a GOAWAY whose last stream ID has been read.
func (w *h2FrameWatch) noteGoAway() {
	w.goAway = false
	last := uint32(w.last[0]&0x7f)<<24 | uint32(w.last[1])<<16 | uint32(w.last[2])<<8 | uint32(w.last[3])
	w.kind = goAwayKindAfter(w.kind, last)
	w.goAways++
}

// goAwayKind is how the server's GOAWAY came, GoAwayNone when none did.
func (w *h2FrameWatch) goAwayKind() GoAwayKind {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kind
}

// grpcCall is one call's record, which the stats handler fills in from
// grpc-go's events for each attempt.
type grpcCall struct {
	retries atomic.Int32
	firstNS atomic.Int64 // the first attempt's start (Unix nanoseconds)
	lastNS  atomic.Int64 // the last attempt's start
	// sent: the last attempt's headers went to a connection (stats.OutHeader);
	// answered: the server's headers or trailers came back on it. A call
	// failed unsent was failed by grpc-go itself, its channel having no
	// ready connection; one sent and unanswered lost its connection.
	sent, answered atomic.Bool
	// conn is the pool's connection the last attempt went on, found by
	// the local address its OutHeader named (nil when none was): it
	// counts the answer, and a failure sent on it carries its address
	// (Result.Addr, for conntrack to say which pod it went to) and the
	// GOAWAY read on it.
	conn atomic.Pointer[grpcConn]
	// nth: the last attempt was the nth sent on its connection (0: none
	// was sent).
	nth    atomic.Uint32
	header metadata.MD
}

// phase says where a failed call stopped, as its attempts' events show:
// dial when grpc-go never sent it (its channel had no connection: the
// status is grpc-go's own, with the last connection attempt's error),
// read_headers when it was sent and no answer came (the connection was
// lost under it), none when the server answered (its own status).
func (c *grpcCall) phase() Phase {
	switch {
	case !c.sent.Load():
		return PhaseDial
	case !c.answered.Load():
		return PhaseReadHeaders
	}
	return PhaseNone
}

type grpcCallKey struct{}

// retryCounter is the stats handler that counts each call's attempts,
// and the responses on the pool's connections.
type retryCounter struct{ pool *grpcGoPool }

func (retryCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (rc retryCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, _ := ctx.Value(grpcCallKey{}).(*grpcCall)
	if c == nil {
		return
	}
	var b *stats.Begin
	switch s := s.(type) {
	case *stats.Begin:
		b = s
	case *stats.OutHeader:
		if local, ok := s.LocalAddr.(*net.TCPAddr); ok {
			if conn, ok := rc.pool.dialled.Load(unmapped(local.AddrPort())); ok {
				c.conn.Store(conn.(*grpcConn))
				c.nth.Store(conn.(*grpcConn).calls.Add(1))
			}
		}
		c.sent.Store(true)
		return
	case *stats.InHeader, *stats.InTrailer:
		// Counted on its connection as the answer comes, before the call
		// returns: a server that closes after its last answer (a graceful
		// stop) ends the connection, and notes it, before then.
		if conn := c.conn.Load(); c.answered.CompareAndSwap(false, true) && conn != nil {
			conn.responses.Add(1)
		}
		return
	default:
		return
	}
	c.sent.Store(false) // a new attempt: what the last one did is its own
	c.answered.Store(false)
	c.conn.Store(nil)
	c.nth.Store(0)
	if b.IsTransparentRetryAttempt {
		c.retries.Add(1)
	} else {
		c.firstNS.CompareAndSwap(0, b.BeginTime.UnixNano())
	}
	c.lastNS.Store(b.BeginTime.UnixNano())
}

func (retryCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (retryCounter) HandleConn(context.Context, stats.ConnStats)                       {}

// rawCodec sends Config.Body as the message as it is (already protobuf)
// and ignores the reply's content: the call's status is the outcome.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(_ []byte, _ any) error { return nil }
func (rawCodec) Name() string                    { return "proto" }

// newGRPCGoPool makes the pool; elapsed is the run's clock (Prober.Elapsed),
// which the connection log's times are on.
func newGRPCGoPool(cfg *Config, d *dialer, userAgent string, elapsed func() time.Duration) (*grpcGoPool, error) {
	pool := &grpcGoPool{log: cfg.ConnLog, cleartext: d.tls == nil, linger: cfg.Timeout + 5*time.Second}
	u := cfg.Target
	address := d.address
	authority := u.Host
	if h := cfg.Header.Get("Host"); h != "" {
		authority = h
	}
	creds := insecure.NewCredentials()
	if d.tls != nil {
		tc := d.tls.Clone()
		tc.NextProtos = []string{"h2"}
		// The name goes to each handshake, not into the credentials,
		// where grpc-go would hold the channel's authority (WithAuthority:
		// the Host header, or the target's host and port) to equal it.
		name := tc.ServerName
		tc.ServerName = ""
		creds = framedTLS{credentials.NewTLS(tc), name}
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithAuthority(authority),
		grpc.WithStatsHandler(retryCounter{pool}),
		grpc.WithUserAgent(userAgent),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
		// One connection per ClientConn, dialed as the prober dials.
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			dialed := elapsed()
			conn, err := (&net.Dialer{KeepAlive: -1, Timeout: cfg.ConnectTimeout}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return conn, err
			}
			remote, ok1 := conn.RemoteAddr().(*net.TCPAddr)
			local, ok2 := conn.LocalAddr().(*net.TCPAddr)
			if ok1 {
				d.dialled.add(remote.AddrPort())
			}
			if !ok1 || !ok2 {
				return conn, nil
			}
			c := &grpcConn{Conn: conn, pool: pool, dialed: dialed, connected: elapsed(), frames: &h2FrameWatch{},
				addr: ConnAddr{Local: unmapped(local.AddrPort()), Remote: unmapped(remote.AddrPort())}}
			pool.dialled.Store(c.addr.Local, c) // a later connection from the port replaces it
			return c, nil
		}),
	}
	for range cfg.Connections {
		cc, err := grpc.NewClient("passthrough:///"+address, opts...)
		if err != nil {
			pool.close()
			return nil, err
		}
		pool.conns = append(pool.conns, cc)
	}
	return pool, nil
}

func (pool *grpcGoPool) conn() *grpc.ClientConn {
	return pool.conns[int(pool.next.Add(1)-1)%len(pool.conns)]
}

func (pool *grpcGoPool) close() {
	for _, cc := range pool.conns {
		_ = cc.Close()
	}
	// grpc-go may end a transport's connection after Close returns: each
	// still open is ended here (Close notes a connection once), so the log
	// is whole when the run's outcome is read.
	pool.dialled.Range(func(_, c any) bool {
		_ = c.(*grpcConn).Close()
		return true
	})
}

// doGRPCGo performs one call through grpc-go and fills res: its status as
// the caller sees it, and the retries grpc-go made on its own.
func (w *worker) doGRPCGo(res *Result) {
	p := w.p
	cfg := &p.cfg
	res.Start = p.Elapsed()
	deadline := p.start.Add(res.Start + cfg.Timeout)
	ctx, cancel := context.WithDeadline(p.running, deadline)
	defer cancel()
	call := &grpcCall{}
	ctx = context.WithValue(ctx, grpcCallKey{}, call)
	if len(p.grpcMD) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, p.grpcMD)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, p.h2req.idName, p.template.idPrefix+strconv.FormatUint(res.Seq, 10))
	body := cfg.Body
	err := p.grpcGo.conn().Invoke(ctx, "/"+cfg.GRPCMethod, &body, &[]byte{}, grpc.Header(&call.header))
	res.End = p.Elapsed()
	if n := call.retries.Load(); n > 0 {
		res.HiddenRetries = uint8(min(n, 255))
		res.RetryDelay = time.Duration(call.lastNS.Load() - call.firstNS.Load())
	}
	if b := call.header.Get(p.backendHeader); p.backendHeader != "" && len(b) > 0 {
		if b[0] != w.backend {
			w.backend = b[0]
		}
		res.Backend = w.backend
	}
	if conn := call.conn.Load(); conn != nil {
		// Its connection as the other engines say theirs. grpc-go opens
		// them: the first call sent on one that came up after the call
		// began (the call waited for it) is the one it was opened for.
		n := call.nth.Load()
		res.ConnReqs, res.ConnAge = n-1, max(0, res.Start-conn.connected)
		res.Fresh = n == 1 && res.ConnAge == 0
	}
	if err == nil {
		res.Status, res.Class = 200, OK
		return
	}
	st, _ := status.FromError(err)
	res.Phase, res.Err = call.phase(), err
	if httpStatus, ok := nonGRPCAnswer(st.Message()); ok && res.Phase == PhaseReadHeaders {
		// The server's headers came, and were not gRPC's (a proxy's 502,
		// say): grpc-go fails such a call before its stats see an answer.
		res.Phase, res.Status = PhaseNone, httpStatus
		if conn := call.conn.Load(); call.answered.CompareAndSwap(false, true) && conn != nil {
			conn.responses.Add(1)
		}
	}
	var streamEnd, h2Code string // a call sent and unanswered: how it ended
	if conn := call.conn.Load(); res.Phase != PhaseDial && conn != nil {
		addr := conn.addr // sent on this connection
		res.Addr = &addr
		if res.Phase == PhaseReadHeaders {
			// Sent, unanswered: whether its connection was lost, and
			// whether a GOAWAY came first (then the stream was at or below
			// its last ID: grpc-go resends the ones above unseen). None
			// read is none: every frame the server sent was read, in TLS
			// or not.
			res.GoAway = conn.frames.goAwayKind()
			if conn.ended.Load() {
				streamEnd = report.StreamEndConnLost
			}
		}
	}
	if res.Phase == PhaseReadHeaders {
		// grpc-go's words say how, whatever became of the connection
		// since: its stream reset by the server (not a connection lost,
		// whose GOAWAY or its absence would explain it), or closed as
		// above a GOAWAY's last stream.
		if code, ok := strings.CutPrefix(st.Message(), grpcGoReset); ok {
			streamEnd, h2Code = report.StreamEndReset, code
		} else if st.Message() == grpcGoDrained {
			streamEnd = report.StreamEndUnprocessed
		}
	}
	switch {
	case p.running.Err() != nil:
		res.Canceled = true
	case st.Code() == codes.DeadlineExceeded && !time.Now().Before(deadline):
		res.Class = Timeout // the prober's own time ran out, as for the raw mode
	default:
		res.Class, res.GRPCStatus, res.Err = GRPCStatus, GRPCCodeName(int(st.Code())), errors.New(oneLine(st.Message()))
		res.StreamEnd, res.H2Code = streamEnd, h2Code
	}
}

// grpcGoReset begins grpc-go's message for a call whose stream the server
// reset (RST_STREAM), the frame's error code after it (its transport's
// handleRSTStream; TestGRPCGoResetStreams holds it to the pinned module).
const grpcGoReset = "stream terminated by RST_STREAM with error code: "

// grpcGoDrained is grpc-go's message for a call whose stream was above the
// last stream of the server's GOAWAY (handleGoAway closes it unprocessed)
// and that it did not resend: it resends such a call once, transparently.
// TestGRPCGoPhaseSaysWhetherACallWasSent holds it to the pinned module.
const grpcGoDrained = "the connection is draining"

// nonGRPCAnswer says whether grpc-go failed a call with msg on reading
// the server's response headers (its transport's operateHeaders): a
// response that is not gRPC (no application/grpc content-type, an HTTP
// status other than 200) or whose headers it found malformed. Its HTTP
// status, when the message gives one (else 0), is the response's.
// Matched on grpc-go's own words: TestGRPCGoNonGRPCAnswers holds them to
// the version the module pins.
func nonGRPCAnswer(msg string) (httpStatus int, ok bool) {
	const unexpected = "unexpected HTTP status code received from server: "
	if rest, found := strings.CutPrefix(msg, unexpected); found {
		digits, _, _ := strings.Cut(rest, " ")
		n, err := strconv.Atoi(digits)
		return n, err == nil
	}
	for _, prefix := range []string{
		"malformed header: missing HTTP ",
		"transport: malformed ",
		"protocol error: informational header",
		"a HEADERS frame cannot appear in the middle of a stream",
		"peer header list size exceeded limit",
	} {
		if strings.HasPrefix(msg, prefix) {
			return 0, true
		}
	}
	return 0, false
}

// oneLine is a status message on one line, as every output shows a
// failure's error: grpc-go puts a response body that is not gRPC on lines
// of its own ("...\ndata: \"Bad Gateway\""), and a grpc-message may hold
// any text.
func oneLine(msg string) string { return lineBreaks.Replace(msg) }

var lineBreaks = strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ")

// grpcMetadata is cfg's headers as the calls' metadata (names in lower
// case; those gRPC sets itself left out).
func grpcMetadata(cfg *Config) metadata.MD {
	md := metadata.MD{}
	for name, values := range cfg.Header {
		switch strings.ToLower(name) {
		case "host", "te", "content-type", "user-agent", strings.ToLower(cfg.RequestIDHeader):
			continue
		}
		md.Append(strings.ToLower(name), values...)
	}
	return md
}

// unmapped is ap with an IPv4-mapped IPv6 address as plain IPv4, as the
// other engines record their connections.
func unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
