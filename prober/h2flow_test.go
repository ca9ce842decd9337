package prober

import (
	"slices"
	"testing"
)

// TestH2SendFlowWindows: a body goes out as far as the smaller of the
// connection's and the stream's windows allow, a lowered
// SETTINGS_INITIAL_WINDOW_SIZE takes an open stream's window below zero
// (RFC 9113 §6.9.2) and a WINDOW_UPDATE has to make that up first, and
// the streams waiting are served in the order they came.
func TestH2SendFlowWindows(t *testing.T) {
	f := newH2SendFlow()
	a, b := &h2stream{id: 1}, &h2stream{id: 3}
	f.open(a, make([]byte, 40000))
	f.open(b, make([]byte, 40000))
	var sent []int
	take := func(st *h2stream) {
		for {
			data, _ := f.next(st)
			if data == nil {
				return
			}
			sent = append(sent, len(data))
		}
	}
	take(a)
	take(b)
	// a: 16,384 + 16,384 + 7,232 (its whole body); b: the connection's
	// 25,535 left, in frames of at most 16,384.
	if want := []int{16384, 16384, 7232, 16384, 9151}; !slices.Equal(sent, want) {
		t.Fatalf("frames %v, want %v", sent, want)
	}
	if f.conn != 0 || len(a.bodyLeft) != 0 || len(b.bodyLeft) != 40000-25535 {
		t.Fatalf("connection window %d, a left %d, b left %d", f.conn, len(a.bodyLeft), len(b.bodyLeft))
	}
	open := map[uint32]bool{3: true}
	isOpen := func(w h2Waiting) bool { return open[w.id] }
	f.wait(b, isOpen)
	if err := f.settings(10000, func(each func(*h2stream)) { each(b) }); err != nil {
		t.Fatal(err)
	}
	if b.sendWindow != 10000-25535 {
		t.Fatalf("b's window %d after the settings, want %d", b.sendWindow, 10000-25535)
	}
	sent = sent[:0]
	f.update(nil, 100000)
	f.send(isOpen, func(id uint32, data []byte, last bool) { sent = append(sent, len(data)) })
	if len(sent) != 0 {
		t.Fatalf("sent %v on a stream window below zero", sent)
	}
	f.update(b, 15535+5000)
	f.send(isOpen, func(id uint32, data []byte, last bool) { sent = append(sent, len(data)) })
	if want := []int{5000}; !slices.Equal(sent, want) || len(f.waiting) != 1 {
		t.Fatalf("frames %v and %d waiting, want %v and b still waiting", sent, len(f.waiting), want)
	}
	if err := f.settings(1<<31, func(func(*h2stream)) {}); err == nil {
		t.Error("SETTINGS_INITIAL_WINDOW_SIZE 2^31 taken")
	}
	if _, err := f.update(nil, 1<<31-1); err != errFlowOverflow {
		t.Errorf("the connection's window past 2^31-1: %v, want errFlowOverflow", err)
	}
	f.update(b, 1) // b's window was 0: 2^31-1 more is past it
	if streamErr, _ := f.update(b, 1<<31-1); !streamErr {
		t.Error("a stream's window past 2^31-1 taken")
	}
}

// TestH2SendFlowDropsEnded: streams that ended with their body waiting
// leave the list before it grows, though no window opened to clear them.
func TestH2SendFlowDropsEnded(t *testing.T) {
	f := newH2SendFlow()
	open := map[uint32]bool{}
	isOpen := func(w h2Waiting) bool { return open[w.id] }
	for id := uint32(1); id < 2000; id += 2 {
		st := &h2stream{id: id}
		f.open(st, []byte("x"))
		f.wait(st, isOpen)
		open[id] = true
		delete(open, id-8) // at most four open at once
	}
	if n := len(f.waiting); n > 16 {
		t.Errorf("%d entries waiting for 4 open streams", n)
	}
}
