package rollout

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rollprobe/rollprobe/report"
)

// The clock lists pods with a selector that matches none and keeps each
// answer's resourceVersion with the list's send time; failed lists and
// answers without a valid version are not kept.
func TestRevisionClockMarks(t *testing.T) {
	kube := fake.NewClientset()
	var selectors []string
	answers := []func() (runtime.Object, error){
		func() (runtime.Object, error) {
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "41"}}, nil
		},
		func() (runtime.Object, error) { return nil, errors.New("apiserver away") },
		func() (runtime.Object, error) {
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "007"}}, nil
		},
		func() (runtime.Object, error) {
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "100"}}, nil
		},
	}
	kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
		obj, err := answers[0]()
		answers = answers[1:]
		return true, obj, err
	})
	clock := 0
	now := func() time.Time { clock++; return t0.Add(time.Duration(clock) * time.Second) }
	c := NewRevisionClock(kube, "shop", 0, now)
	for range 4 {
		c.Mark(context.Background())
	}
	marks := c.Marks()
	if len(marks) != 2 {
		t.Fatalf("marks %+v: want 2 kept (41, 100), not the error or the malformed version", marks)
	}
	// The clock reads 1 s later at each call: a list's send, its answer's receipt.
	if marks[0] != (RevisionMark{Sent: t0.Add(time.Second), Version: "41", Received: t0.Add(2 * time.Second)}) ||
		marks[1] != (RevisionMark{Sent: t0.Add(5 * time.Second), Version: "100", Received: t0.Add(6 * time.Second)}) {
		t.Errorf("marks %+v", marks)
	}
	if selectors[0] != "metadata.name="+markSelector {
		t.Errorf("list field selector %q", selectors[0])
	}
	if c.Period() != 100*time.Millisecond {
		t.Errorf("default period %v", c.Period())
	}
}

// A deletion is stamped with the send time of the latest mark whose version
// is below the deletion's: numerically (9 < 10 < 100, not as strings), and
// strictly (a mark at the deletion's own version already contained it).
// Stamping stops at a watch error: after a relist the version seen can be a
// later write's.
func TestStampBoundsDeletionsByRevision(t *testing.T) {
	sec := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	marks := []RevisionMark{{Sent: sec(3), Version: "100"}, {Sent: sec(1), Version: "9"}, {Sent: sec(2), Version: "10"}}
	del := func(pod, rv string) report.Event {
		return report.Event{Kind: report.PodDeletionRequested, Pod: pod, ResourceVersion: rv}
	}
	events := []report.Event{
		del("a", "10"),  // above 9 only: after the mark sent at 1 s
		del("b", "99"),  // above 10: after 2 s
		del("c", "101"), // above all: after 3 s
		del("d", "9"),   // no mark below it
		del("e", "x1"),  // not a version
		{Kind: report.PodReady, Pod: "f", ResourceVersion: "500"}, // not a deletion
		{Kind: report.WatchError, Detail: "pods watch: gone"},
		del("g", "200"), // after the watch resumed
	}
	if n := Stamp(events, marks); n != 3 {
		t.Errorf("stamped %d, want 3", n)
	}
	want := map[string]*time.Time{"a": ptrTo(sec(1)), "b": ptrTo(sec(2)), "c": ptrTo(sec(3))}
	for _, e := range events {
		w := want[e.Pod]
		if (w == nil) != (e.CommittedAfter == nil) || (w != nil && !w.Equal(*e.CommittedAfter)) {
			t.Errorf("%s (rv %s): committed after %v, want %v", e.Pod, e.ResourceVersion, e.CommittedAfter, w)
		}
	}
	if n := Stamp([]report.Event{del("a", "10")}, nil); n != 0 {
		t.Errorf("no marks: stamped %d", n)
	}
}

func ptrTo(t time.Time) *time.Time { return &t }

var t0 = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

// The version of the watched update goes into pod events, so the
// deletion carries the version of its own write.
func TestPodEventsCarryTheirVersion(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: strconv.Itoa(42)}}
	if e := podEvent(report.PodDeletionRequested, p); e.ResourceVersion != "42" {
		t.Errorf("event %+v", e)
	}
}

// A stall is a span over the bound with no list answered and no event
// received from the API server; rollprobe's own events are no sign of
// life, a watch's event is, and a silence running to the end is open.
func TestStalls(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var marks []RevisionMark
	for ms := 0; ms <= 20000; ms += 100 {
		if (ms > 3000 && ms < 11000) || ms > 17000 {
			continue // frozen from 3 s to 11 s, and from 17 s on
		}
		marks = append(marks, RevisionMark{Sent: at(ms - 50), Received: at(ms), Version: "1"})
	}
	events := []report.Event{
		{At: at(6000), Kind: report.RolloutTriggered},         // ours: not a sign
		{At: at(7000), Kind: report.PodDeletionRequested},     // a watch's: splits the silence
		{At: at(11000), Kind: report.PodGone},                 // at the resume
		{At: at(30000), Kind: report.PodCreated, Pod: "late"}, // after the clock stopped: not counted
	}
	got := Stalls(at(0), at(20000), marks, events, 2*time.Second)
	want := []report.ViewStall{
		{Start: at(3000), End: at(7000), DurationS: 4},
		{Start: at(7000), End: at(11000), DurationS: 4},
		{Start: at(17000), End: at(20000), DurationS: 3, Open: true},
	}
	if len(got) != len(want) {
		t.Fatalf("stalls %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].Start.Equal(want[i].Start) || !got[i].End.Equal(want[i].End) || got[i].DurationS != want[i].DurationS || got[i].Open != want[i].Open {
			t.Errorf("stall %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := Stalls(at(0), at(3000), marks, nil, 2*time.Second); len(s) != 0 {
		t.Errorf("a live view stalled: %+v", s)
	}
	if s := Stalls(at(0), at(0), nil, nil, 2*time.Second); s != nil {
		t.Errorf("an empty span stalled: %+v", s)
	}
}
