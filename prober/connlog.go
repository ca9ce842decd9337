package prober

import (
	"sync"
	"time"
)

// ConnLog collects, for a run that asks for it (Config.ConnLog), one
// record per connection that carried at least one response: its two ends,
// when it was dialled and how many responses came on it. With conntrack's
// record of where each connection went (natwatch), that says which pod
// served every response, with no backend header. A connection is noted
// once, when it ends (every engine ends its connections by the end of the
// run), so the log is complete once the run's outcome is in.
//
// Memory grows with the connections, as the conntrack table's does (about
// 80 bytes each): a new connection per request at 18,000 a second is
// some 90 MB a minute; kept-alive runs hold a few hundred records.
type ConnLog struct {
	mu    sync.Mutex
	conns []ConnRecord
}

// ConnRecord is one connection of a ConnLog.
type ConnRecord struct {
	Addr ConnAddr
	// Dialed is the run offset (from Prober.Start) at which its dial
	// began: conntrack notes a connection at its SYN, from then on.
	Dialed time.Duration
	// Responses is how many responses it carried (any status).
	Responses uint32
}

// Note records a connection that ended; a nil log, or a connection that
// carried nothing, records nothing.
func (l *ConnLog) Note(addr ConnAddr, dialed time.Duration, responses uint32) {
	if l == nil || responses == 0 {
		return
	}
	l.mu.Lock()
	l.conns = append(l.conns, ConnRecord{Addr: addr, Dialed: dialed, Responses: responses})
	l.mu.Unlock()
}

// Conns returns the records so far (a copy).
func (l *ConnLog) Conns() []ConnRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ConnRecord(nil), l.conns...)
}
