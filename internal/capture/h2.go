package capture

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/report"
)

// TsharkAvailable says why HTTP/2 frames cannot be decoded here, or nil.
func TsharkAvailable() error {
	if _, err := exec.LookPath("tshark"); err != nil {
		return errors.New("tshark is not installed (apt-get install tshark)")
	}
	return nil
}

// H2Conn is one HTTP/2 connection as Wireshark's dissector decoded it from
// the capture: what the client opened and what the server answered, reset
// and announced, frame by frame.
type H2Conn struct {
	// Start is when its first packet was captured.
	Start time.Time
	// Requests are the stream IDs of the client's HEADERS, in order.
	Requests []uint32
	// Responses are the streams the server ended (END_STREAM on its
	// HEADERS or DATA): a whole response, trailers included.
	Responses map[uint32]bool
	// Resets are the server's RST_STREAMs: stream ID to error code.
	Resets map[uint32]uint32
	// Canceled are the streams the client reset (RST_STREAM CANCEL).
	Canceled map[uint32]bool
	// GoAways are the last stream IDs of the server's GOAWAYs, in order.
	GoAways []uint32
}

// HTTP/2 error codes (RFC 9113 §7) the referee tells apart.
const (
	refusedStream = 0x7
	cancel        = 0x8
)

// H2Wire is what a capture of HTTP/2 traffic to a server port shows.
type H2Wire struct {
	Conns []*H2Conn
	// Refused are the connection attempts the server's side answered with
	// a reset (nothing listening), Unanswered those it never answered
	// (SYNs alone: a vanished address), each by its first SYN's time.
	Refused, Unanswered []time.Time
}

// Since is w without what began before t: a client's connections made
// before the run of interest (rollprobe run's preflight check, say).
func (w H2Wire) Since(t time.Time) H2Wire {
	var out H2Wire
	for _, c := range w.Conns {
		if !c.Start.Before(t) {
			out.Conns = append(out.Conns, c)
		}
	}
	for _, at := range w.Refused {
		if !at.Before(t) {
			out.Refused = append(out.Refused, at)
		}
	}
	for _, at := range w.Unanswered {
		if !at.Before(t) {
			out.Unanswered = append(out.Unanswered, at)
		}
	}
	return out
}

// Classes is what the frames say each request's outcome was, by
// rollprobe's class names: each stream the server ended is an ok, each
// one the client cancelled a timeout, each one above its connection's
// last GOAWAY and unanswered a goaway_unprocessed, at or below it a
// goaway_cut, on a connection without GOAWAY a closed_no_goaway; each
// connect reset a refused, each unanswered one a connect_timeout. A close
// without GOAWAY is a FIN, or a TCP reset when the server's socket held
// unread bytes: the frames cannot tell them apart, so compare
// closed_no_goaway with rollprobe's closed_no_goaway and reset together.
func (w H2Wire) Classes() map[string]uint64 {
	out := map[string]uint64{}
	if len(w.Refused) > 0 {
		out[report.ClassRefused] = uint64(len(w.Refused))
	}
	if len(w.Unanswered) > 0 {
		out[report.ClassConnectTimeout] = uint64(len(w.Unanswered))
	}
	for _, hc := range w.Conns {
		for _, id := range hc.Requests {
			var c string
			switch {
			case hc.Responses[id]:
				c = report.ClassOK
			case hc.Canceled[id]:
				c = report.ClassTimeout
			case hc.Resets[id] == refusedStream:
				c = report.ClassRefusedStream
			case hc.Resets[id] != 0:
				c = report.ClassRSTStream
			case len(hc.GoAways) > 0 && id > hc.GoAways[len(hc.GoAways)-1]:
				c = report.ClassGoAwayUnprocessed
			case len(hc.GoAways) > 0:
				c = report.ClassGoAwayCut
			default:
				c = report.ClassClosedNoGoAway
			}
			out[c]++
		}
	}
	return out
}

// H2 stops the capture and decodes it with tshark as HTTP/2 (prior
// knowledge, cleartext) on serverPort.
func (c *Capture) H2(serverPort int) H2Wire {
	c.t.Helper()
	c.Stop()
	w, err := decodeH2(c.pcap, serverPort)
	if err != nil {
		c.t.Fatal(err)
	}
	return w
}

// decodeH2 decodes the capture file pcap as H2 does.
//
// tcp.reassemble_out_of_order: each direction's bytes are handed to the
// HTTP/2 dissector once, in TCP order, as the receiver read them. By
// default tshark skips a segment it takes for a retransmission, and a
// segment lost before the capture point, then resent, is one (the sender
// had moved on): its frames vanished from the referee though the client
// read them (a lab run lost a response to 5 streams so; the fixture
// testdata/h2-response-only-retransmitted.pcap is that connection).
func decodeH2(pcap string, serverPort int) (H2Wire, error) {
	port := strconv.Itoa(serverPort)
	out, err := exec.Command("tshark", "-r", pcap, "-n", "-o", "tcp.reassemble_out_of_order:TRUE", "-d", "tcp.port=="+port+",http2",
		"-T", "fields", "-E", "separator=|",
		"-e", "frame.time_epoch", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.flags.syn", "-e", "tcp.flags.ack", "-e", "tcp.flags.reset",
		"-e", "http2.type", "-e", "http2.streamid", "-e", "http2.flags", "-e", "http2.goaway.last_stream_id", "-e", "http2.rst_stream.error").Output()
	if err != nil {
		return H2Wire{}, fmt.Errorf("tshark -r %s: %w", pcap, err)
	}
	return parseH2Fields(string(out), port)
}

// parseH2Fields reads tshark's field lines (see H2). In one packet the
// frame type, stream ID and flags lists align frame by frame; the GOAWAY
// and RST_STREAM lists hold one entry per frame of that type, in order.
func parseH2Fields(out, serverPort string) (H2Wire, error) {
	var w H2Wire
	conns := map[string]*H2Conn{}
	synAcked := map[string]bool{}
	synAt := map[string]time.Time{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 11 {
			continue
		}
		at, err := epoch(f[0])
		if err != nil {
			return w, err
		}
		f = f[1:]
		tcpStream, fromServer := f[0], f[1] == serverPort
		if _, seen := synAt[tcpStream]; !fromServer && f[2] == "1" && f[3] == "0" && !seen {
			synAt[tcpStream] = at
			order = append(order, tcpStream)
		}
		if fromServer && f[2] == "1" && f[3] == "1" {
			synAcked[tcpStream] = true
		}
		if fromServer && f[4] == "1" && !synAcked[tcpStream] {
			w.Refused = append(w.Refused, synAt[tcpStream])
			synAcked[tcpStream] = true // one per attempt
		}
		if f[5] == "" {
			continue
		}
		hc := conns[tcpStream]
		if hc == nil {
			start, ok := synAt[tcpStream]
			if !ok {
				start = at
			}
			hc = &H2Conn{Start: start, Responses: map[uint32]bool{}, Resets: map[uint32]uint32{}, Canceled: map[uint32]bool{}}
			conns[tcpStream] = hc
			w.Conns = append(w.Conns, hc)
		}
		types, ids, flags := strings.Split(f[5], ","), strings.Split(f[6], ","), strings.Split(f[7], ",")
		goAways, resets := splitNonEmpty(f[8]), splitNonEmpty(f[9])
		if len(types) != len(ids) || len(types) != len(flags) {
			return w, errors.New("tshark: frame types, stream IDs and flags do not align: " + line)
		}
		for i, t := range types {
			id64, err := strconv.ParseUint(ids[i], 10, 32)
			if err != nil {
				return w, err
			}
			id := uint32(id64)
			fl, err := strconv.ParseUint(flags[i], 0, 8)
			if err != nil {
				return w, err
			}
			endStream := fl&1 != 0
			switch t {
			case "0": // DATA
				if fromServer && endStream {
					hc.Responses[id] = true
				}
			case "1": // HEADERS
				switch {
				case !fromServer:
					hc.Requests = append(hc.Requests, id)
				case endStream:
					hc.Responses[id] = true
				}
			case "3": // RST_STREAM
				if len(resets) == 0 {
					return w, errors.New("tshark: an RST_STREAM without its error code: " + line)
				}
				code, err := strconv.ParseUint(resets[0], 0, 32)
				if err != nil {
					return w, err
				}
				resets = resets[1:]
				if fromServer {
					hc.Resets[id] = uint32(code)
				} else if code == cancel {
					hc.Canceled[id] = true
				}
			case "7": // GOAWAY
				if len(goAways) == 0 {
					return w, errors.New("tshark: a GOAWAY without its last stream ID: " + line)
				}
				last, err := strconv.ParseUint(goAways[0], 10, 32)
				if err != nil {
					return w, err
				}
				goAways = goAways[1:]
				if fromServer {
					hc.GoAways = append(hc.GoAways, uint32(last))
				}
			}
		}
	}
	for _, s := range order {
		if !synAcked[s] {
			w.Unanswered = append(w.Unanswered, synAt[s])
		}
	}
	return w, nil
}

// epoch parses tshark's frame.time_epoch (seconds, with a fraction).
func epoch(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	frac = (frac + "000000000")[:9]
	ns, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(n, ns), nil
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
