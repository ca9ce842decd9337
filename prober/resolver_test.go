package prober

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// resolverOf is a resolver that answers every A question with addrs, in
// that order, and every other question with no answer: a name with the
// addresses a test chooses (a headless Service's, say), with no DNS server.
// It speaks DNS over TCP's framing on an in-memory pipe (Go's resolver
// does when the connection its Dial returns is not a PacketConn).
func resolverOf(t *testing.T, addrs ...netip.Addr) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go answerDNS(t, server, addrs)
		return client, nil
	}}
}

// answerDNS answers the queries read from c until it is closed.
func answerDNS(t *testing.T, c net.Conn, addrs []netip.Addr) {
	defer c.Close()
	for {
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(query); err != nil || len(m.Questions) != 1 {
			t.Errorf("a query the test's resolver cannot read: %v", err)
			return
		}
		q := m.Questions[0]
		answer := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: m.ID, Response: true, Authoritative: true, RecursionAvailable: true},
			Questions: m.Questions,
		}
		if q.Type == dnsmessage.TypeA {
			for _, a := range addrs {
				answer.Answers = append(answer.Answers, dnsmessage.Resource{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
					Body:   &dnsmessage.AResource{A: a.As4()},
				})
			}
		}
		out, err := answer.Pack()
		if err != nil {
			t.Errorf("packing the test resolver's answer: %v", err)
			return
		}
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out)))); err != nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
