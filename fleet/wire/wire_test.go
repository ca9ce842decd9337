package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// Every field of a result that is not OK survives the line.
func TestResultRoundTrip(t *testing.T) {
	in := prober.Result{Seq: 42, Intended: 1500 * time.Millisecond, Start: 1501 * time.Millisecond, End: 3501 * time.Millisecond,
		Class: prober.EOFReused, Phase: prober.PhaseReadHeaders, Status: 0, Fresh: false, SlowConnect: true, Connect: 980 * time.Millisecond, ConnReqs: 7,
		ConnAge: 12 * time.Second, Backend: "web-1", Err: errors.New("connection closed before any response byte"),
		Addr:        &prober.ConnAddr{Local: netip.MustParseAddrPort("10.244.1.5:40000"), Remote: netip.MustParseAddrPort("10.96.0.10:80")},
		ServerClose: prober.CloseBeforeRequest, Canceled: true}
	h2 := in
	h2.Class, h2.ServerClose, h2.H2Code, h2.GoAway = prober.GoAwayUnprocessed, prober.CloseUnknown, "NO_ERROR", prober.GoAwayGraceful
	grpc := in
	grpc.Class, grpc.ServerClose, grpc.GRPCStatus = prober.GRPCStatus, prober.CloseUnknown, "UNAVAILABLE"
	grpc.HiddenRetries, grpc.RetryDelay = 2, 3*time.Millisecond
	grpc.StreamEnd, grpc.H2Code = report.StreamEndReset, "INTERNAL_ERROR"
	rejected := in
	rejected.Class, rejected.Phase, rejected.ServerClose = prober.Refused, prober.PhaseDial, prober.CloseUnknown
	rejected.DialICMP = &prober.DialICMP{From: netip.MustParseAddr("10.244.1.1"), Type: 3, Code: 3}
	reset := rejected
	reset.DialICMP = &prober.DialICMP{} // the queue read, empty
	rejected6 := rejected
	rejected6.DialICMP = &prober.DialICMP{From: netip.MustParseAddr("fd00::1"), Type: 1, Code: 4, V6: true}
	for _, in := range []prober.Result{in, h2, grpc, rejected, reset, rejected6} {
		l := roundTrip(t, Line{Seq: 1, Kind: KindResult, Result: FromResult(&in)})
		out, err := l.Result.ToResult()
		if err != nil {
			t.Fatal(err)
		}
		if out.Err.Error() != in.Err.Error() {
			t.Fatalf("error %q, want %q", out.Err, in.Err)
		}
		out.Err, in.Err = nil, nil
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
		}
	}
}

// An aggregate's histograms come back bucket for bucket; one without the
// after-write histogram (a prober from before it) comes back without it.
func TestAggregateRoundTrip(t *testing.T) {
	lowest, highest, digits := prober.HistogramShape()
	for _, withAfterWrite := range []bool{true, false} {
		lat, svc, aw := hdr.New(lowest, highest, int(digits)), hdr.New(lowest, highest, int(digits)), hdr.New(lowest, highest, int(digits))
		for i := range int64(1000) {
			_ = lat.RecordValue(100 + i*i)
			_ = svc.RecordValue(50 + i)
			_ = aw.RecordValue(20 + i%7)
		}
		in := prober.Aggregate{Second: 9, Sent: 10, Slow: 1, MaxLag: time.Millisecond, Retries: prober.HiddenRetries{Calls: 2, Attempts: 3, DelaySum: 5 * time.Millisecond, DelayMax: 4 * time.Millisecond}, Fresh: 4, Reused: 6, OK: 1000,
			Status: map[int]uint64{200: 990, 204: 10}, Backends: map[string]uint64{"a": 600, "b": 400}, Latency: lat, Service: svc, AfterWrite: aw}
		if !withAfterWrite {
			in.AfterWrite = nil
		}
		a, err := FromAggregate(&in)
		if err != nil {
			t.Fatal(err)
		}
		l := roundTrip(t, Line{Seq: 3, Kind: KindAgg, Agg: a})
		out, err := l.Agg.ToAggregate()
		if err != nil {
			t.Fatal(err)
		}
		if !dense(out.LatencyBuckets).Equals(lat) || !dense(out.ServiceBuckets).Equals(svc) {
			t.Fatal("histograms changed on the way")
		}
		if got := out.AfterWriteBuckets != nil; got != withAfterWrite || (got && !dense(out.AfterWriteBuckets).Equals(aw)) {
			t.Fatalf("after-write histogram sent %v: came back %v, or changed", withAfterWrite, got)
		}
		out.LatencyBuckets, out.ServiceBuckets, out.AfterWriteBuckets, in.Latency, in.Service, in.AfterWrite = nil, nil, nil, nil, nil, nil
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
		}
	}
}

// roundTrip encodes l as a line and parses it back.
func roundTrip(t *testing.T, l Line) Line {
	t.Helper()
	b, err := Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// dense is p as a recorder's histogram.
func dense(p *hdr.PackedHistogram) *hdr.Histogram {
	lowest, highest, digits := prober.HistogramShape()
	h := hdr.New(lowest, highest, int(digits))
	p.ForEachBucket(func(v, c int64) bool { _ = h.RecordValues(v, c); return true })
	return h
}

// A histogram of another shape is refused before it is decoded: merging
// it would not be exact, and decoding a wide one allocates without bound.
func TestAggregateOfAnotherShapeIsRefused(t *testing.T) {
	wide := hdr.New(1, math.MaxInt64/4, 5)
	_ = wide.RecordValue(10)
	enc, err := wide.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	a := &Agg{Second: 1, OK: 1, Latency: string(enc), Service: string(enc)}
	if _, err := a.ToAggregate(); err == nil || !strings.Contains(err.Error(), "the recorder's is") {
		t.Fatalf("err = %v", err)
	}
}

// Parse tells other log lines from protocol lines, and refuses lines that
// do not hold together.
func TestParseRefuses(t *testing.T) {
	if _, err := Parse([]byte("panic: runtime error")); !errors.Is(err, ErrNotProtocol) {
		t.Fatalf("a panic line: %v", err)
	}
	for _, bad := range []string{
		`rp1 {"seq":1,"k":"end"}`,                                                       // kind without its field
		`rp1 {"seq":1,"k":"end","end":{},"final":{}}`,                                   // two fields
		`rp1 {"k":"end","end":{}}`,                                                      // no seq
		`rp1 {"seq":1,"k":"nope","end":{}}`,                                             // unknown kind
		`rp1 {"seq":1,"k":"end","end":{},"extra":1}`,                                    // unknown field
		`rp1 {"seq":1,"k":"end","end":{}} {}`,                                           // trailing data
		`rp1 {"seq":1,"k":"result","r":{"class":"bogus"}}`,                              // unknown class
		`rp1 {"seq":1,"k":"result","r":{"class":"reset","intended_ns":5,"start_ns":4}}`, // started before intended
		`rp1 {"seq":1,"k":"hello","hello":{"protocol":2}}`,                              // another version
		`rp1 {"seq":1,"k":"agg","a":{"s":1,"latency":"AAAA"}}`,                          // one histogram of two
		`rp1 {"seq":1,"k":"agg","a":{"s":1,"status":{"0":1}}}`,                          // status 0
		`rp1 {"seq":1,"k":"result","r":{"class":"refused","dial_icmp":{"from":"gw"}}}`,  // no address
	} {
		if _, err := Parse([]byte(bad)); err == nil || errors.Is(err, ErrNotProtocol) {
			t.Errorf("%s: accepted (%v)", bad, err)
		}
	}
}

// The writer numbers lines 1, 2, 3; a reader takes each once, skips those
// seen again, and stops at a gap.
func TestSequence(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range 3 {
		if err := w.Write(Line{Kind: KindFinal, Final: &Final{Before: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []uint64
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		l, err := Parse([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, l.Seq)
	}
	if !reflect.DeepEqual(seqs, []uint64{1, 2, 3}) {
		t.Fatalf("seqs %v", seqs)
	}
	var s Sequence
	for _, step := range []struct {
		seq  uint64
		want bool
		gap  bool
	}{{1, true, false}, {2, true, false}, {1, false, false}, {2, false, false}, {3, true, false}, {5, false, true}} {
		got, err := s.Accept(step.seq)
		if got != step.want || errors.Is(err, ErrGap) != step.gap {
			t.Fatalf("Accept(%d) = %v, %v", step.seq, got, err)
		}
	}
}

// An end line's dialled addresses come back as they were noted; one
// that is not ip:port, or more than a prober keeps, is refused.
func TestEndDialled(t *testing.T) {
	addrs := []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:80"), netip.MustParseAddrPort("[fd00::1]:443")}
	b, err := Encode(Line{Seq: 1, Kind: KindEnd, End: &End{Dialled: FromDialled(addrs, true)}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.End.Dialled.AddrPorts()
	if err != nil || !reflect.DeepEqual(got, addrs) || !l.End.Dialled.More {
		t.Fatalf("%s: dialled %v (more %v), %v", b, got, l.End.Dialled.More, err)
	}
	if l, err := Parse([]byte(`rp1 {"seq":1,"k":"end","end":{}}`)); err != nil || l.End.Dialled != nil {
		t.Errorf("an end without dialled: %+v, %v; want it unknown (nil)", l.End, err)
	}
	many := make([]string, prober.MaxDialled+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"10.0.0.%d:80"`, i+1)
	}
	for _, bad := range []string{`["10.96.0.10"]`, `["a name:80"]`, "[" + strings.Join(many, ",") + "]"} {
		if _, err := Parse([]byte(`rp1 {"seq":1,"k":"end","end":{"dialled":{"addrs":` + bad + `}}}`)); err == nil {
			t.Errorf("dialled %s accepted", bad)
		}
	}
}

// The parser takes any bytes without panicking, and what it accepts
// encodes and parses back to the same line.
func FuzzParse(f *testing.F) {
	lat := hdr.New(1, 3600000000, 3)
	_ = lat.RecordValue(1234)
	enc, _ := lat.Encode(hdr.V2CompressedEncodingCookieBase)
	for _, seed := range []string{
		`rp1 {"seq":1,"k":"hello","hello":{"protocol":1,"prober":"p","node":"n","version":"v","wall_ns":1}}`,
		`rp1 {"seq":2,"k":"result","r":{"seq":3,"intended_ns":1,"start_ns":2,"end_ns":3,"class":"refused","phase":"dial","local":"1.2.3.4:5"}}`,
		`rp1 {"seq":3,"k":"agg","a":{"s":1,"ok":1,"status":{"200":1},"latency":"` + string(enc) + `","service":"` + string(enc) + `"}}`,
		`rp1 {"seq":4,"k":"end","end":{"elapsed_ns":1,"target":100}}`,
		`rp1 {"seq":5,"k":"end","end":{"elapsed_ns":1,"target":100,"dialled":{"addrs":["10.96.0.10:80","[fd00::1]:443"],"more":true}}}`,
		`rp1 {"seq":6,"k":"end","end":{"dialled":{"addrs":[]}}}`,
		`rp1 {"seq":7,"k":"agg","a":{"s":1,"status":{}}}`,
		`not ours`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		l, err := Parse(line)
		if err != nil {
			return
		}
		b, err := Encode(l)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", line, err)
		}
		// Equal as lines, not as Go values: an empty list or map reads
		// back as none, which is what omitempty writes for it.
		again, err := Parse(b)
		if err != nil {
			t.Fatalf("%q: not parsed back: %v", b, err)
		}
		if b2, err := Encode(again); err != nil || !bytes.Equal(b2, b) {
			t.Fatalf("%q: parsed back and encoded as %q, %v", b, b2, err)
		}
	})
}
