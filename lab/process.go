package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// startDaemon starts argv inside network namespace ns (and mount namespace
// mountNS, a file, when not "") as a detached process (its own session,
// stdin from /dev/null, output appended to logPath) and records its PID in
// pidPath. The process outlives the caller; the lab stops it by that PID.
//
// nsenter enters the namespaces and then execs argv, so the PID is the
// component's own. (`ip netns exec` would also remount /sys, hiding the
// cgroup hierarchies the kubelet needs.)
func startDaemon(ns, mountNS string, argv, env []string, logPath, pidPath string) (int, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", filepath.Base(argv[0]), err)
	}
	defer logf.Close()
	enter := []string{"--net=" + netns.NSPath(ns)}
	if mountNS != "" {
		enter = append(enter, "--mount="+mountNS)
	}
	cmd := exec.Command("nsenter", append(append(enter, "--"), argv...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", filepath.Base(argv[0]), err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while we are still running; after we exit, init does.
	go func() { _ = cmd.Wait() }()
	if err := WritePID(pidPath, pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, err
	}
	return pid, nil
}

// WritePID records pid with its start time, so that a later reader can tell
// our process from an unrelated one that reused the number.
func WritePID(path string, pid int) error {
	st, _ := startTime(pid)
	return os.WriteFile(path, []byte(fmt.Sprintf("%d %s\n", pid, st)), 0o644)
}

// readPID reads a PID file written by WritePID. ok is false when the file
// is missing or malformed, or when the PID now names another process.
func readPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, false
	}
	if len(f) > 1 {
		if st, ok := startTime(pid); ok && st != f[1] {
			return 0, false // reused by another process
		}
	}
	return pid, true
}

// Alive reports whether pid is a running process (zombies awaiting their
// reaper are dead).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// startTime returns the process start time from /proc (clock ticks since
// boot), used to check that a PID from a file still names our process and
// was not reused by another one.
func startTime(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(s[i+1:])
	// Field 22 of stat is starttime; fields here start at field 3.
	if len(fields) < 20 {
		return "", false
	}
	return fields[19], true
}

// stopPID sends SIGTERM, waits up to grace, then SIGKILLs and waits for the
// process to be gone.
func stopPID(pid int, grace time.Duration) error {
	if !Alive(pid) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !Alive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if !Alive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("process %d survived SIGKILL", pid)
}

var errNotRoot = errors.New("the lab needs root: it creates network and mount namespaces, cgroups and nftables rules (run it with sudo)")

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	for _, tool := range []struct{ name, pkg string }{{"ip", "iproute2"}, {"nft", "nftables"}, {"nsenter", "util-linux"},
		{"unshare", "util-linux"}, {runcPath, "runc"}} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Errorf("the lab needs %s (Debian: apt-get install %s, or make lab-deps): %w", tool.name, tool.pkg, err)
		}
	}
	return nil
}
