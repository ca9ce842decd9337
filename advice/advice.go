// Package advice holds the one text of each fix rollprobe gives where two
// places give it (the doctor's static checks and the run's analysis), so a
// report never carries two versions of the same advice.
package advice

import "fmt"

// Version is a Kubernetes server version; the zero value is unknown.
type Version struct{ Major, Minor int }

// Known reports whether the version was read from the server.
func (v Version) Known() bool { return v.Major > 0 }

func (v Version) String() string {
	if !v.Known() {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", v.Major, v.Minor)
}

// Before reports whether v is known and older than major.minor.
func (v Version) Before(major, minor int) bool {
	return v.Known() && (v.Major < major || v.Major == major && v.Minor < minor)
}

// PreStopSleep is the hook that keeps a container serving for seconds
// after its deletion, written for the server's version:
// lifecycle.preStop.sleep is beta and on by default from 1.30 (GA in 1.34);
// before 1.30, or when the version is unknown, the exec form is named too.
func PreStopSleep(seconds int, v Version) string {
	sleep := fmt.Sprintf("lifecycle.preStop.sleep.seconds: %d", seconds)
	exec := fmt.Sprintf(`lifecycle.preStop.exec.command: ["sleep", "%d"]`, seconds)
	switch {
	case v.Before(1, 30):
		return exec + " (the sleep action needs Kubernetes 1.30)"
	case !v.Known():
		return sleep + ` (Kubernetes 1.30+; before that, exec ["sleep", "` + fmt.Sprint(seconds) + `"], which needs a sleep binary in the image)`
	}
	return sleep
}
