package capture

import (
	"maps"
	"testing"

	"github.com/rollprobe/rollprobe/report"
)

// A response whose first transmission was lost before the capture point
// and that reached the client resent is an answer (testdata: a lab run's
// connection whose 5 streams 31..39 were answered so, at 8.356 s).
func TestH2ResponseOnlySeenResent(t *testing.T) {
	if err := TsharkAvailable(); err != nil {
		t.Skip(err)
	}
	w, err := decodeH2("testdata/h2-response-only-retransmitted.pcap", 30090)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Conns) != 1 {
		t.Fatalf("%d connections, want the fixture's one", len(w.Conns))
	}
	got := w.Classes()
	want := map[string]uint64{report.ClassOK: 25}
	if !maps.Equal(got, want) {
		t.Errorf("classes %v, want %v", got, want)
	}
}
