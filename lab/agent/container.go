package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/lab/netns"
)

// container runs one container of a pod as a local process.
type container struct {
	r    *podRunner
	spec *corev1.Container

	mu        sync.Mutex
	state     corev1.ContainerState
	lastState corev1.ContainerState
	ready     bool
	started   bool
	restarts  int32
	proc      *os.Process
	exited    chan struct{} // closed when proc exits
	stopping  bool
	pid       int
}

func newContainer(r *podRunner, spec *corev1.Container) *container {
	return &container{r: r, spec: spec, state: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"},
	}}
}

func (c *container) snapshot() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := corev1.ContainerStatus{
		Name: c.spec.Name, Image: c.spec.Image, ImageID: "rollprobe-lab://" + c.spec.Image,
		State: *c.state.DeepCopy(), LastTerminationState: *c.lastState.DeepCopy(),
		Ready: c.ready, RestartCount: c.restarts, Started: &c.started,
	}
	if c.pid > 0 {
		cs.ContainerID = fmt.Sprintf("rollprobe-lab://%d", c.pid)
	}
	return cs
}

// binary maps the container's image repository to a local program.
func (c *container) binary() (string, bool) {
	repo := c.spec.Image
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	bin, ok := c.r.a.cfg.Images[repo]
	return bin, ok
}

func (c *container) run(ctx context.Context) {
	bin, ok := c.binary()
	if !ok {
		// As a kubelet whose image pull fails: the pod stays Pending.
		c.setWaiting("ErrImagePull", fmt.Sprintf("image %q is not known to the lab (known: its images map)", c.spec.Image))
		c.r.containerChanged(ctx)
		select {
		case <-time.After(2 * time.Second):
			c.setWaiting("ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q", c.spec.Image))
			c.r.containerChanged(ctx)
		case <-c.r.terminate:
		case <-ctx.Done():
		}
		return
	}
	backoff := time.Second
	for {
		if err := c.start(bin); err != nil {
			c.r.log.Warn("container start", "container", c.spec.Name, "err", err)
			c.setWaiting("RunContainerError", err.Error())
		} else {
			c.r.containerChanged(ctx)
			probeCtx, stopProbes := context.WithCancel(ctx)
			go c.probe(probeCtx)
			c.mu.Lock()
			exited := c.exited
			c.mu.Unlock()
			<-exited
			stopProbes()
		}
		c.mu.Lock()
		stopping := c.stopping
		c.mu.Unlock()
		if stopping || ctx.Err() != nil {
			c.r.containerChanged(ctx)
			return
		}
		// Crashed while the pod should run: restart with back-off
		// (restartPolicy Always, the only policy Deployments allow).
		c.mu.Lock()
		c.restarts++
		c.lastState = c.state
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		c.mu.Unlock()
		c.r.containerChanged(ctx)
		select {
		case <-time.After(backoff):
		case <-c.r.terminate:
			return
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (c *container) setWaiting(reason, message string) {
	c.mu.Lock()
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
	c.mu.Unlock()
}

// start launches the process inside the pod's namespace.
func (c *container) start(bin string) error {
	pod := c.r.current()
	args := []string{"netns", "exec", c.r.net.NS, bin}
	if len(c.spec.Command) > 1 {
		args = append(args, c.spec.Command[1:]...)
	}
	args = append(args, c.spec.Args...)
	cmd := exec.Command("ip", args...)
	cmd.Env = c.env(pod)
	logPath := filepath.Join(c.r.dir, c.spec.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	_ = lab.WritePID(filepath.Join(c.r.dir, c.spec.Name+".pid"), cmd.Process.Pid)
	exited := make(chan struct{})
	c.mu.Lock()
	c.proc, c.pid, c.exited = cmd.Process, cmd.Process.Pid, exited
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	noStartup := c.spec.StartupProbe == nil
	c.started = noStartup
	// Without a readiness probe a container is ready once started.
	c.ready = noStartup && c.spec.ReadinessProbe == nil
	c.mu.Unlock()
	c.r.log.Info("container started", "container", c.spec.Name, "pid", cmd.Process.Pid, "ip", c.r.net.IP)
	go func() {
		err := cmd.Wait()
		code, reason := exitCode(cmd.ProcessState, err)
		c.mu.Lock()
		started := c.state.Running
		term := &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: metav1.Now(), ContainerID: fmt.Sprintf("rollprobe-lab://%d", c.pid)}
		if started != nil {
			term.StartedAt = started.StartedAt
		}
		c.state = corev1.ContainerState{Terminated: term}
		c.ready, c.proc = false, nil
		c.mu.Unlock()
		c.r.log.Info("container exited", "container", c.spec.Name, "exit", code, "reason", reason)
		close(exited)
	}()
	return nil
}

// exitCode reports a process's end as the kubelet does: 128+signal for a
// signalled process (137 for SIGKILL), reason Completed for 0, else Error.
func exitCode(ps *os.ProcessState, err error) (int32, string) {
	if ps == nil {
		return 128, "Error"
	}
	code := ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code == 0 && err == nil {
		return 0, "Completed"
	}
	return int32(code), "Error"
}

func (c *container) env(pod *corev1.Pod) []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + pod.Name,
		"KUBERNETES_SERVICE_HOST=" + netns.APIServerIP,
		"KUBERNETES_SERVICE_PORT=443",
	}
	for _, e := range c.spec.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "status.podIP":
				v = c.r.net.IP
			case "status.hostIP":
				v = c.r.a.cfg.NodeIP
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// stop terminates the container as the kubelet does: the preStop hook
// within the grace period, SIGTERM, then what is left of the grace period
// (at least 2 s), then SIGKILL. Readiness probes go on meanwhile.
func (c *container) stop(ctx context.Context, grace time.Duration) {
	c.mu.Lock()
	c.stopping = true
	proc, exited := c.proc, c.exited
	c.mu.Unlock()
	if proc == nil {
		return
	}
	deadline := time.Now().Add(grace)
	if hook := c.spec.Lifecycle; hook != nil && hook.PreStop != nil && grace > 0 {
		hookCtx, cancel := context.WithDeadline(ctx, deadline)
		start := time.Now()
		err := c.runHandler(hookCtx, hook.PreStop)
		cancel()
		c.r.log.Info("preStop done", "container", c.spec.Name, "took", time.Since(start).Round(time.Millisecond), "err", err)
	}
	wait := time.Until(deadline)
	if wait < minTerminationWait && grace > 0 {
		wait = minTerminationWait
	}
	c.r.log.Info("SIGTERM", "container", c.spec.Name, "kill_after", wait.Round(time.Millisecond))
	_ = proc.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(wait):
	}
	c.r.log.Info("SIGKILL", "container", c.spec.Name)
	_ = proc.Signal(syscall.SIGKILL)
	<-exited
}

// runHandler runs a lifecycle hook: exec (inside the pod's namespace),
// httpGet, or sleep.
func (c *container) runHandler(ctx context.Context, h *corev1.LifecycleHandler) error {
	switch {
	case h.Exec != nil:
		return c.execInPod(ctx, h.Exec.Command)
	case h.HTTPGet != nil:
		return c.httpGet(ctx, h.HTTPGet)
	case h.Sleep != nil:
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case h.TCPSocket != nil:
		return c.tcpConnect(ctx, h.TCPSocket.Port)
	}
	return errors.New("empty lifecycle handler")
}

func (c *container) execInPod(ctx context.Context, command []string) error {
	if len(command) == 0 {
		return errors.New("exec: no command")
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.r.net.NS}, command...)...)
	cmd.Env = c.env(c.r.current())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("exec %v: %w: %s", command, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *container) port(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no container port named %q", p.StrVal)
}

func (c *container) httpGet(ctx context.Context, g *corev1.HTTPGetAction) error {
	port, err := c.port(g.Port)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = c.r.net.IP
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	// A fresh connection per probe and no keep-alive, as the kubelet does.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

func (c *container) tcpConnect(ctx context.Context, p intstr.IntOrString) error {
	port, err := c.port(p)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(c.r.net.IP, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return conn.Close()
}
