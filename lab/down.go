package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// Down stops everything the lab started and removes its namespaces (network
// and mount), cgroups, nft tables (they live in the namespaces) and state.
// It works from whatever state is left, including after a crashed up, and
// only ends processes the lab started: those in its PID files, the pods in
// its cgroups, the containerd shims serving its nodes' sockets, and anything
// left inside its namespaces, each by PID.
//
// The order matters: the kubelets first (so nothing restarts a pod), then
// the pods and their shims, then containerd, kube-proxy and the control
// plane.
func Down(stateDir string, progress io.Writer) error {
	logf := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, "lab: "+format+"\n", args...)
		}
	}
	if err := requireRoot(); err != nil {
		return err
	}
	if active := ActiveStateDir(); active != "" && active != stateDir {
		if _, err := ReadRecorded(stateDir); err != nil {
			if _, err := ReadRecorded(active); err == nil {
				logf("the lab's state is in %s", active)
				stateDir = active
			}
		}
	}
	c := Config{StateDir: stateDir}
	nodeDirs, _ := filepath.Glob(c.path("nodes", "*"))
	var errs []error
	stopAll := func(pidFiles []string, grace time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, f := range pidFiles {
			pid, ok := readPID(f)
			if !ok || !Alive(pid) {
				continue
			}
			name := strings.TrimSuffix(strings.TrimPrefix(f, c.path("pids")+"/"), ".pid")
			logf("stopping %s (pid %d)", name, pid)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := stopPID(pid, grace); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	nodeFiles := func(comp string) []string {
		files, _ := filepath.Glob(c.path("pids", "*", comp+".pid"))
		return files
	}

	stopAll(nodeFiles(compKubelet), 5*time.Second)
	if n := killCgroupProcs(); n > 0 {
		logf("killed %d pod processes", n)
	}
	if n := killShims(stateDir); n > 0 {
		logf("killed %d containerd shims", n)
	}
	stopAll(slices.Concat(nodeFiles(compContainerd), nodeFiles(compProxy), nodeFiles(compDelay)), 5*time.Second)
	// A test's second Traefik, when a run ended before its test could stop it.
	stopAll([]string{c.path("pids", compTraefikEmpty+".pid")}, 5*time.Second)
	for _, comp := range slices.Backward(hubComponents) {
		stopAll([]string{c.path("pids", comp+".pid")}, 5*time.Second)
	}

	names, _ := netns.List()
	var ours []string
	for _, ns := range names {
		if ns == netns.LabNetNS || strings.HasPrefix(ns, netns.NodeNSPrefix) {
			ours = append(ours, ns)
		}
	}
	// Anything still inside our namespaces was started by the lab.
	for _, ns := range ours {
		for _, pid := range netns.PIDs(ns) {
			if err := stopPID(pid, time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	// A node's mount namespace ends with its bind mount (its overlay and
	// pod-network mounts go with it, once no process is left inside).
	for _, dir := range nodeDirs {
		for _, m := range []string{filepath.Join(dir, "ns", "mnt"), filepath.Join(dir, "ns")} {
			if mounted(m) {
				if err := syscall.Unmount(m, 0); err != nil {
					errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
				}
			}
		}
	}
	for _, ns := range ours {
		logf("removing network namespace %s", ns)
		if _, err := netns.IP("netns", "delete", ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // keep the state: it names what is left
	}
	if err := os.RemoveAll(stateDir); err != nil {
		return fmt.Errorf("state %s: %w", stateDir, err)
	}
	if err := os.Remove(ActiveMarker); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("marker: %w", err)
	}
	return nil
}

// killCgroupProcs SIGKILLs every process in the lab's cgroups (the pods'
// containers and sandboxes), until none is left or 10 s have passed, and
// returns how many it signalled.
func killCgroupProcs() int {
	killed := map[int]bool{}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		pids := cgroupProcs()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if !killed[pid] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				killed[pid] = true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return len(killed)
}

// cgroupProcs lists the live processes in the lab's cgroups.
func cgroupProcs() []int {
	var pids []int
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, CgroupRoot), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && Alive(pid) && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups removes the lab's cgroups, deepest first, retrying while the
// kernel empties them.
func removeCgroups() error {
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		left = left[:0]
		for _, h := range cgroupHierarchies() {
			var dirs []string
			_ = filepath.WalkDir(filepath.Join(h, CgroupRoot), func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			for _, d := range slices.Backward(dirs) {
				if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups left (still busy): %s", strings.Join(left, " "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killShims SIGKILLs the containerd shims serving this lab's nodes: a shim
// outlives its pod's containers and containerd itself, and is found by the
// node socket on its command line. It returns how many it signalled.
func killShims(stateDir string) int {
	pids := Shims(stateDir)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if !slices.ContainsFunc(pids, Alive) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return len(pids)
}

// Shims lists the live containerd shims of this lab's nodes.
func Shims(stateDir string) []int {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil
	}
	prefix := filepath.Join(abs, "nodes") + "/"
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && strings.HasPrefix(args[i+1], prefix) && Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mounted reports whether path is a mount point (per /proc/self/mountinfo).
func mounted(path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == abs {
			return true
		}
	}
	return false
}

// ComponentStatus is one process of the lab.
type ComponentStatus struct {
	Name  string // "kube-apiserver", or "lab-node-1/kubelet"
	PID   int
	Alive bool
}

// Status is what lab status reports.
type Status struct {
	StateDir   string
	Up         bool // state recorded
	Components []ComponentStatus
	Shims      int // containerd shims, one per pod
	Recorded   *Recorded
}

// Healthy reports whether every component that should run does, and every
// namespace exists.
func (s Status) Healthy() bool {
	if !s.Up {
		return false
	}
	for _, c := range s.Components {
		if !c.Alive {
			return false
		}
	}
	if !netns.Exists(netns.LabNetNS) {
		return false
	}
	for _, n := range s.Recorded.NodeLayouts() {
		if !netns.Exists(n.NS) {
			return false
		}
	}
	return true
}

// GetStatus reads the state directory and checks each component's process.
func GetStatus(stateDir string) Status {
	st := Status{StateDir: stateDir}
	rec, err := ReadRecorded(stateDir)
	if err != nil {
		return st
	}
	st.Up, st.Recorded = true, rec
	c := Config{StateDir: stateDir}
	add := func(name, pidFile string) {
		pid, ok := readPID(pidFile)
		st.Components = append(st.Components, ComponentStatus{Name: name, PID: pid, Alive: ok && Alive(pid)})
	}
	for _, comp := range hubComponents {
		if comp == compEdgeDelay && rec.EdgeLag == 0 {
			continue
		}
		add(comp, c.path("pids", comp+".pid"))
	}
	for _, node := range rec.Nodes {
		for _, comp := range nodeComponents {
			if comp == compDelay && rec.ProxyLag[node] == 0 {
				continue
			}
			add(node+"/"+comp, c.path("pids", node, comp+".pid"))
		}
	}
	st.Shims = len(Shims(stateDir))
	return st
}
