package prober

import (
	"maps"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Exporting a recorder's results, and merging them into another.
//
// A prober running in the cluster streams its results to the CLI, which
// merges the streams of every prober into one Recorder, so the report,
// the dashboard and the progress lines work as for a local prober. The
// merge is exact: the merged recorder holds the same counts, rows,
// histograms, outages and failures as one recorder given every result.
//
// How: successes are many and alike, failures are few and each is
// evidence. So an exporting recorder hands out every result that is not
// OK in full (the merging recorder records it as if it had been its own),
// and folds the OK results into per-second Aggregates: counts, and
// latency and service-time histograms that merge exactly (HDR histograms
// of the same range and precision add bucket by bucket).

// Aggregate is an exporting recorder's OK results, as deltas: the
// requests begun in second Second (Sent and the fields after it) and those
// completed in it (OK and the fields after it). Aggregates of one second
// may come in several parts (a request begun in it can complete seconds
// later); parts add.
type Aggregate struct {
	Second int64
	// Of the OK requests begun in the second.
	Sent uint64
	Slow uint64 // SlowConnect successes
	// Retries are the successes' hidden retries (GRPCClientGo).
	Retries HiddenRetries
	MaxLag  time.Duration // the largest schedule lag
	Fresh   uint64
	Reused  uint64
	// Of the OK requests completed in the second.
	OK       uint64
	Status   map[int]uint64
	Backends map[string]uint64
	Latency  *hdr.Histogram // from the intended send; nil when none completed
	Service  *hdr.Histogram // from the actual send
	// AfterWrite is from the request's write (Result.AfterWrite); nil when
	// none completed, and from a prober older than the field.
	AfterWrite *hdr.Histogram
	// LatencyBuckets, ServiceBuckets and AfterWriteBuckets are the same
	// histograms as read back from a stream (sparse: no dense counts array
	// to allocate and walk); IngestAggregate uses them when set.
	LatencyBuckets, ServiceBuckets, AfterWriteBuckets *hdr.PackedHistogram
}

// export is an exporting recorder's pending output. Under r.mu.
type export struct {
	results []Result             // results not OK, in merge order
	aggs    map[int64]*Aggregate // OK results by second
	last    *Aggregate           // the last second touched: most results go to it
}

// EnableExport makes the recorder keep what TakeExport hands out. Call it
// before the run starts.
func (r *Recorder) EnableExport() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.export = &export{aggs: map[int64]*Aggregate{}}
}

// exportResult notes res for export. Under r.mu.
func (r *Recorder) exportResult(res *Result) {
	x := r.st.export
	if res.Canceled || res.Class != OK {
		x.results = append(x.results, *res)
		return
	}
	begun := r.exportAgg(int64(res.Start / time.Second))
	begun.Sent++
	if res.SlowConnect {
		begun.Slow++
	}
	begun.MaxLag = max(begun.MaxLag, res.Lag())
	begun.Retries.add(res)
	if res.Fresh {
		begun.Fresh++
	} else {
		begun.Reused++
	}
	done := r.exportAgg(int64(res.End / time.Second))
	done.OK++
	if res.Status > 0 {
		if done.Status == nil {
			done.Status = map[int]uint64{}
		}
		done.Status[res.Status]++
	}
	if res.Backend != "" {
		if done.Backends == nil {
			done.Backends = map[string]uint64{}
		}
		done.Backends[res.Backend]++
	}
	if res.HasResponse() {
		if done.Latency == nil {
			done.Latency, done.Service, done.AfterWrite = r.histogram(), r.histogram(), r.histogram()
		}
		recordMicros(done.Latency, res.Latency())
		recordMicros(done.Service, res.ServiceTime())
		recordMicros(done.AfterWrite, res.AfterWrite())
	}
}

func (r *Recorder) exportAgg(k int64) *Aggregate {
	x := r.st.export
	if x.last != nil && x.last.Second == k {
		return x.last
	}
	a := x.aggs[k]
	if a == nil {
		a = &Aggregate{Second: k}
		x.aggs[k] = a
	}
	x.last = a
	return a
}

// Export is what an exporting recorder has gathered since the last take.
type Export struct {
	// Results are every result that is not OK (canceled ones included),
	// in the order the recorder merged them.
	Results []Result
	// Aggregates are the OK results' deltas, by second.
	Aggregates []Aggregate
	// FinalBefore: the recorder's seconds before this are final (their
	// quantiles computed); a merging recorder may finalise them once
	// every source has passed them.
	FinalBefore int64
}

// TakeExport hands out what the recorder gathered since the last take
// (after a Tick has merged the workers' results). The histograms in the
// aggregates belong to the caller, who gives them back with
// ReleaseExport once encoded.
func (r *Recorder) TakeExport() Export {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.st.export
	if x == nil {
		return Export{}
	}
	out := Export{Results: x.results, FinalBefore: r.st.closedUpTo}
	for _, a := range x.aggs {
		out.Aggregates = append(out.Aggregates, *a)
	}
	x.results, x.last = nil, nil
	clear(x.aggs)
	return out
}

// ReleaseExport gives the export's histograms back for reuse.
func (r *Recorder) ReleaseExport(e Export) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range e.Aggregates {
		for _, h := range []*hdr.Histogram{a.Latency, a.Service, a.AfterWrite} {
			if h != nil {
				h.Reset()
				r.st.spareHists = append(r.st.spareHists, h)
			}
		}
	}
}

// Ingest records results from another (exporting) recorder as this
// recorder's own: the same counts, rows, histograms, outages and kept
// failures as if its workers had measured them. Times must already be on
// this recorder's clock.
func (r *Recorder) Ingest(results []Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range results {
		if r.add(&results[i]) {
			r.keep(&results[i])
		}
	}
}

// IngestAggregate adds another recorder's OK results of one second, as
// the Results they came from would have been added: a second already final
// gains the counts but not the quantiles, as for a local late result.
func (r *Recorder) IngestAggregate(a Aggregate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.st
	st.classes[OK] += a.OK
	st.fresh += a.Fresh
	st.reused += a.Reused
	st.slow += a.Slow
	st.retries.merge(a.Retries)
	st.maxLag = max(st.maxLag, a.MaxLag)
	for code, n := range a.Status {
		if code > 0 && code < len(st.status) {
			st.status[code] += n
		}
	}
	for b, n := range a.Backends {
		countBackendN(st.backends, b, n)
	}
	a.merge(st.latency, st.service, nil)
	if a.Sent > 0 || a.Slow > 0 || a.MaxLag > 0 {
		begun, _ := r.second(a.Second)
		begun.Sent += a.Sent
		begun.SlowConnects += a.Slow
		begun.MaxLag = max(begun.MaxLag, a.MaxLag)
	}
	if a.OK == 0 {
		return
	}
	done, open := r.second(a.Second)
	done.Classes[OK] += a.OK
	if open != nil {
		a.merge(open.latency, open.service, open.okAfterWrite)
		a.merge(nil, open.okService, nil) // an aggregate holds successes only
	}
	if len(a.Backends) > 0 {
		switch {
		case done.Backends == nil:
			done.Backends = map[string]uint64{}
		case open == nil:
			done.Backends = maps.Clone(done.Backends) // snapshots share a final row's map
		}
		for b, n := range a.Backends {
			countBackendN(done.Backends, b, n)
		}
	}
}

// merge adds the aggregate's latency and service-time histograms to
// latency and service, and its after-write one to afterWrite, exactly (the
// same shape: bucket for bucket); a nil destination is left out.
func (a *Aggregate) merge(latency, service, afterWrite *hdr.Histogram) {
	for _, x := range []struct {
		to     *hdr.Histogram
		dense  *hdr.Histogram
		packed *hdr.PackedHistogram
	}{{latency, a.Latency, a.LatencyBuckets}, {service, a.Service, a.ServiceBuckets}, {afterWrite, a.AfterWrite, a.AfterWriteBuckets}} {
		switch {
		case x.to == nil:
		case x.packed != nil:
			x.packed.ForEachBucket(func(value, count int64) bool {
				_ = x.to.RecordValues(value, count)
				return true
			})
		case x.dense != nil:
			x.to.Merge(x.dense)
		}
	}
}

// FinaliseBefore makes every second before k final (its quantiles
// computed): a merging recorder's tick, once every source is past k.
func (r *Recorder) FinaliseBefore(k int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finalise(k)
}
