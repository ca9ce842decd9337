package analysis

import (
	"fmt"

	"github.com/rollprobe/rollprobe/report"
)

// attributeInView attributes f as a does, unless f began inside one of
// stalls (report.ViewStall): then nothing that changed during the stall
// had been received when f began, so a change received up to the stall's
// end (plus the usual tolerance) may have acted before f. The receive
// tolerance is widened by the rest of the stall for f alone, and f's
// context says so. Conntrack and the backend header name the pod whatever
// the view did; they are used as always. The stall counts f. It returns
// what attribute does.
func attributeInView(a attributor, f *report.Failure, stalls []report.ViewStall) []leftRules {
	at := beganAt(f)
	var s *report.ViewStall
	for i := range stalls {
		if !at.Before(stalls[i].Start) && at.Before(stalls[i].End) {
			s = &stalls[i]
			break
		}
	}
	if s == nil {
		return a.attribute(f)
	}
	s.Failures++
	a.tol += s.End.Sub(at)
	left := a.attribute(f)
	if f.Evidence != report.EvidenceTimeline {
		return left
	}
	s.Widened++
	note := fmt.Sprintf("inside a %.1fs stall of rollprobe's view of the cluster: changes received up to its end counted, so the pod is less certain", s.DurationS)
	if f.Context == "" {
		f.Context = note
	} else {
		f.Context += "; " + note
	}
	return left
}
