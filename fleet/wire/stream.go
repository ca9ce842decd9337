package wire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/rollprobe/rollprobe/prober"
)

// Writer writes protocol lines with their sequence numbers. Safe for
// concurrent use: the export loop and the pong answers share it.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	seq uint64
	err error
}

// NewWriter writes to w (a prober's stdout).
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 64<<10)} }

// Write numbers l, writes it, and flushes: a line the CLI cannot read yet
// helps nobody, and the log's lines must be whole. The first error sticks.
func (w *Writer) Write(l Line) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.seq++
	l.Seq = w.seq
	b, err := Encode(l)
	if err != nil {
		w.err = err
		return err
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	w.err = w.w.Flush()
	return w.err
}

// Sequence checks a stream's sequence numbers: each line once, none missing.
type Sequence struct{ next uint64 }

// ErrGap: lines were lost between two that were read.
var ErrGap = errors.New("lines missing from the prober's stream")

// Accept reports whether the line with sequence number seq is new (the
// next one), false for one seen before (a resumed stream re-reading its
// start), and ErrGap when lines before it are missing.
func (s *Sequence) Accept(seq uint64) (bool, error) {
	if s.next == 0 {
		s.next = 1
	}
	switch {
	case seq < s.next:
		return false, nil
	case seq > s.next:
		return false, fmt.Errorf("%w: expected line %d, got %d", ErrGap, s.next, seq)
	}
	s.next++
	return true, nil
}

// WriteExport writes what a recorder exported: each result, each
// aggregate, then the seconds now final.
func (w *Writer) WriteExport(x prober.Export) error {
	for i := range x.Results {
		if err := w.Write(Line{Kind: KindResult, Result: FromResult(&x.Results[i])}); err != nil {
			return err
		}
	}
	for i := range x.Aggregates {
		a, err := FromAggregate(&x.Aggregates[i])
		if err != nil {
			return err
		}
		if err := w.Write(Line{Kind: KindAgg, Agg: a}); err != nil {
			return err
		}
	}
	return w.Write(Line{Kind: KindFinal, Final: &Final{Before: x.FinalBefore}})
}
