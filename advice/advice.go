// Package advice holds the one text of each fix rollprobe gives where two
// places give it (the doctor's static checks and the run's analysis), so a
// report never carries two versions of the same advice.
package advice

import (
	"fmt"
	"strconv"
	"strings"
)

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

// ParseVersion reads "major.minor" as String writes it (and as the
// report's rollout.server_version holds it; a "+" after the minor, as some
// servers report, is ignored). Anything else is the zero, unknown, Version.
func ParseVersion(s string) Version {
	major, minor, ok := strings.Cut(s, ".")
	if !ok {
		return Version{}
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(strings.TrimRight(minor, "+"))
	if err1 != nil || err2 != nil {
		return Version{}
	}
	return Version{Major: ma, Minor: mi}
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

// ClientsOffNotReadyService is the fix for a Service with
// publishNotReadyAddresses, whose endpoints stay listed as ready from a
// pod's start until it is gone: the doctor's check of the setting and the
// run's findings it changes give it.
const ClientsOffNotReadyService = "send clients through a Service without publishNotReadyAddresses (a StatefulSet that needs it for peer discovery keeps it on its own headless Service, its serviceName, and gives clients another): a readiness probe and a preStop sleep cannot take a pod out of rotation while it is set"
