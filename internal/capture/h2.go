package capture

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
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

// H2Wire is what a capture of HTTP/2 traffic to a server port shows.
type H2Wire struct {
	Conns []*H2Conn
	// RefusedConnects counts SYNs the server's host answered with a
	// reset (nothing listening).
	RefusedConnects int
}

// H2 stops the capture and decodes it with tshark as HTTP/2 (prior
// knowledge, cleartext) on serverPort.
func (c *Capture) H2(serverPort int) H2Wire {
	c.t.Helper()
	c.Stop()
	port := strconv.Itoa(serverPort)
	out, err := exec.Command("tshark", "-r", c.pcap, "-n", "-d", "tcp.port=="+port+",http2",
		"-T", "fields", "-E", "separator=|",
		"-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.flags.syn", "-e", "tcp.flags.ack", "-e", "tcp.flags.reset",
		"-e", "http2.type", "-e", "http2.streamid", "-e", "http2.flags", "-e", "http2.goaway.last_stream_id", "-e", "http2.rst_stream.error").Output()
	if err != nil {
		c.t.Fatalf("tshark -r: %v", err)
	}
	w, err := parseH2Fields(string(out), port)
	if err != nil {
		c.t.Fatal(err)
	}
	return w
}

// parseH2Fields reads tshark's field lines (see H2). In one packet the
// frame type, stream ID and flags lists align frame by frame; the GOAWAY
// and RST_STREAM lists hold one entry per frame of that type, in order.
func parseH2Fields(out, serverPort string) (H2Wire, error) {
	var w H2Wire
	conns := map[string]*H2Conn{}
	synAcked := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 10 {
			continue
		}
		tcpStream, fromServer := f[0], f[1] == serverPort
		if fromServer && f[2] == "1" && f[3] == "1" {
			synAcked[tcpStream] = true
		}
		if fromServer && f[4] == "1" && !synAcked[tcpStream] {
			w.RefusedConnects++
			synAcked[tcpStream] = true // one per attempt
		}
		if f[5] == "" {
			continue
		}
		hc := conns[tcpStream]
		if hc == nil {
			hc = &H2Conn{Responses: map[uint32]bool{}, Resets: map[uint32]uint32{}, Canceled: map[uint32]bool{}}
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
				} else if code == 8 { // CANCEL
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
	return w, nil
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
