package prober

import (
	"testing"
	"time"
)

func TestConstantPacer(t *testing.T) {
	p := ConstantPacer{Freq: 4, Duration: time.Second}
	for n, want := range []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond} {
		got, ok := p.Offset(uint64(n))
		if !ok || got != want {
			t.Errorf("Offset(%d) = %v, %v; want %v", n, got, ok, want)
		}
	}
	if _, ok := p.Offset(4); ok {
		t.Error("Offset(4) at 1s: want the schedule to end before the duration")
	}
	if got := Expected(p, time.Second); got != 4 {
		t.Errorf("Expected over 1s = %d, want 4", got)
	}
}

func TestPacerRates(t *testing.T) {
	for _, rate := range []float64{1, 3, 200, 10000, 33333.3} {
		p := ConstantPacer{Freq: rate}
		for _, d := range []time.Duration{time.Second, 7 * time.Second} {
			want := uint64(rate * d.Seconds())
			got := Expected(p, d)
			if got+1 < want || got > want+1 {
				t.Errorf("rate %g over %s: %d requests scheduled, want %d±1", rate, d, got, want)
			}
		}
	}
	if _, ok := (ConstantPacer{}).Offset(0); ok {
		t.Error("zero rate must schedule nothing")
	}
}
