package prober

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// silentServer accepts connections, reads each request, and then, with
// answer, sends a complete response without closing (no FIN), else
// nothing; it then reads on and keeps each connection's read error: how
// the prober let go of it (io.EOF for its FIN, ECONNRESET for its reset).
type silentServer struct {
	ln   net.Listener
	mu   sync.Mutex
	errs []error
	wg   sync.WaitGroup
}

func startSilentServer(t *testing.T, answer bool) *silentServer {
	t.Helper()
	s := &silentServer{}
	s.ln = acceptEach(t, &s.wg, func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // bounded
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				s.note(err)
				return
			}
			if strings.TrimSpace(line) == "" {
				break
			}
		}
		if answer {
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pod-Name: a\r\n\r\nok"))
		}
		_, err := br.ReadByte()
		s.note(err)
	})
	return s
}

func (s *silentServer) note(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// ends waits for every connection's end and returns how each ended.
func (s *silentServer) ends() []error {
	s.ln.Close()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs
}

// A connection the prober gives up on while its peer is silent (a request
// that timed out; a response whose server sent no FIN within retireWait)
// is let go with a reset, not a FIN: a FIN to a vanished pod leaves
// conntrack's entry half closed, which the port's next SYN would join to
// that pod (see conn.abort). The server's own reads are the referee: each
// connection ends in ECONNRESET.
func TestSilentPeersAreReset(t *testing.T) {
	forEachEngine(t, func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			answer bool
			class  Class
		}{
			{"no response: a timeout", false, Timeout},
			{"a response, no FIN", true, OK},
		} {
			srv := startSilentServer(t, tc.answer)
			_, snap := runTestProber(t, "http://"+srv.ln.Addr().String()+"/", func(c *Config) {
				c.Rate, c.Duration, c.Timeout, c.Conn, c.BackendHeader = 10, 300*time.Millisecond, 300*time.Millisecond, ConnMode{FreshFraction: 1}, ""
			}, nil)
			if sent := snap.Totals.Sent(); sent == 0 || snap.Totals.Classes[tc.class] != sent {
				t.Fatalf("%s: classes %v of %d sent, want every one %s", tc.name, snap.Totals.Classes, sent, tc.class)
			}
			ends := srv.ends()
			if len(ends) == 0 {
				t.Fatalf("%s: the server saw no connection end", tc.name)
			}
			for i, err := range ends {
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("%s: connection %d ended with %v, want the prober's reset", tc.name, i, err)
				}
			}
		}
	})
}
