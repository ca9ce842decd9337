package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// cluster is a fake API server whose prober pods run in-process agents:
// attach reaches the agent's stdin and stdout, and the log is what it wrote.
type cluster struct {
	kube *fake.Clientset
	ctx  context.Context // the agents' lifetime: the test's
	// waiting, when set, is the reason every pod's container waits with
	// instead of running (a bad image).
	waiting string
	n       atomic.Int64

	mu     sync.Mutex
	agents map[string]*agentProc
	// breakLogOnce makes the first log stream of each pod end early.
	breakLogOnce bool
	// attachErr, when set, is what every attach fails with.
	attachErr error
	// skews are the pods' clocks' offsets, in order of creation (none
	// for the rest).
	skews  []time.Duration
	broken map[string]bool
	// refuse, when set, is what admission answers a dry run with.
	refuse  error
	dryRuns atomic.Int64
}

type agentProc struct {
	stdinW *io.PipeWriter
	log    *followBuf
	out    io.Writer // the attached stdout, while attached
	outMu  sync.Mutex
}

func newCluster(t *testing.T) *cluster {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // agents still waiting for a start (a launch that failed) end with the test
	c := &cluster{kube: fake.NewClientset(), agents: map[string]*agentProc{}, broken: map[string]bool{}, ctx: ctx}
	c.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if len(a.(k8stesting.CreateActionImpl).CreateOptions.DryRun) > 0 {
			// As the API server: admission answers, nothing is created.
			c.dryRuns.Add(1)
			if c.refuse != nil {
				return true, nil, c.refuse
			}
			return true, p, nil
		}
		i := c.n.Add(1)
		p.Name = fmt.Sprintf("%s%d", p.GenerateName, i)
		p.Spec.NodeName = fmt.Sprintf("node-%d", i)
		if c.waiting != "" {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: Container, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: c.waiting, Message: "pull access denied"}}}}
			return false, nil, nil
		}
		p.Status.Phase = corev1.PodRunning
		var skew time.Duration
		if int(i) <= len(c.skews) {
			skew = c.skews[i-1]
		}
		c.start(t, p.Name, p.Spec.NodeName, skew)
		return false, nil, nil
	})
	return c
}

// start runs the pod's agent.
func (c *cluster) start(t *testing.T, pod, node string, skew time.Duration) {
	inR, inW := io.Pipe()
	proc := &agentProc{stdinW: inW, log: newFollowBuf()}
	c.mu.Lock()
	c.agents[pod] = proc
	c.mu.Unlock()
	out := writerFunc(func(b []byte) (int, error) {
		proc.outMu.Lock()
		if proc.out != nil {
			_, _ = proc.out.Write(b)
		}
		proc.outMu.Unlock()
		return proc.log.Write(b)
	})
	go func() {
		_ = RunAgent(c.ctx, AgentConfig{RunID: pod, Name: pod, Node: node, Version: "test",
			MaxDuration: time.Minute, StartTimeout: time.Minute, Now: func() time.Time { return time.Now().Add(skew) }}, inR, out)
		proc.log.Close()
	}()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (c *cluster) Attach(ctx context.Context, pod string, stdin io.Reader, stdout io.Writer) error {
	if c.attachErr != nil {
		return c.attachErr
	}
	c.mu.Lock()
	proc := c.agents[pod]
	c.mu.Unlock()
	if proc == nil {
		return fmt.Errorf("no pod %s", pod)
	}
	proc.outMu.Lock()
	proc.out = stdout
	proc.outMu.Unlock()
	go func() { _, _ = io.Copy(proc.stdinW, stdin) }()
	<-ctx.Done()
	return ctx.Err()
}

func (c *cluster) Logs(ctx context.Context, pod string) (io.ReadCloser, error) {
	c.mu.Lock()
	proc := c.agents[pod]
	breakIt := c.breakLogOnce && !c.broken[pod]
	c.broken[pod] = true
	c.mu.Unlock()
	if proc == nil {
		return nil, fmt.Errorf("no pod %s", pod)
	}
	r := proc.log.reader(ctx)
	if breakIt {
		return &cutReader{r: r, after: 3}, nil
	}
	return r, nil
}

// followBuf is an append-only log that readers follow until it is closed.
type followBuf struct {
	mu     sync.Mutex
	cond   *sync.Cond
	data   []byte
	closed bool
}

func newFollowBuf() *followBuf {
	b := &followBuf{}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *followBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.data = append(b.data, p...)
	b.mu.Unlock()
	b.cond.Broadcast()
	return len(p), nil
}

func (b *followBuf) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cond.Broadcast()
}

type followReader struct {
	b   *followBuf
	off int
	ctx context.Context
}

func (b *followBuf) reader(ctx context.Context) *followReader {
	r := &followReader{b: b, ctx: ctx}
	go func() { <-ctx.Done(); b.cond.Broadcast() }()
	return r
}

func (r *followReader) Read(p []byte) (int, error) {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	for r.off == len(r.b.data) {
		if r.b.closed {
			return 0, io.EOF
		}
		if r.ctx.Err() != nil {
			return 0, r.ctx.Err()
		}
		r.b.cond.Wait()
	}
	n := copy(p, r.b.data[r.off:])
	r.off += n
	return n, nil
}

func (r *followReader) Close() error { return nil }

// cutReader ends a stream after a few lines, as a broken connection would.
type cutReader struct {
	r     io.Reader
	after int
	lines int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.lines >= c.after {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.r.Read(p)
	c.lines += bytes.Count(p[:n], []byte("\n"))
	return n, err
}

func (c *cutReader) Close() error { return nil }

func fleetConfig(t *testing.T, c *cluster, srv *faultserver.Server, count int) Config {
	return Config{Kube: c.kube, Streams: c, RunID: "r1", Probe: okConfig(t, srv, 300), Logf: t.Logf,
		Pods: PodSpec{Namespace: "ns", Image: "rollprobe/rollprobe:test", Count: count, MaxDuration: time.Minute, StartTimeout: 10 * time.Second}}
}

// runForASecond starts f, stops it after a second and returns its outcome,
// which must have no error.
func runForASecond(t *testing.T, f *Fleet) prober.Outcome {
	t.Helper()
	done := f.Go(context.Background())
	time.Sleep(time.Second)
	f.Stop()
	out := <-done
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	return out
}

func podsLeft(t *testing.T, c *cluster) int {
	list, err := c.kube.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// Three probers, one per node, started together and stopped together: the
// merged recorder counts exactly what the server answered, each prober's
// log stream breaks once and is resumed without loss, and no pod is left.
func TestFleetRunsAndMergesExactly(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	c := newCluster(t)
	c.breakLogOnce = true
	f, err := Launch(context.Background(), fleetConfig(t, c, srv, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The CLI's wall clock set 3 s forward half way: the summary carries
	// its samples, which place the merged offsets where the CLI's
	// timeline is.
	f.noteClock = func(c *report.WallClock, start time.Time) {
		at, wall := time.Since(start), time.Now().Round(0)
		if at > 500*time.Millisecond {
			wall = wall.Add(3 * time.Second)
		}
		c.NoteAt(at, wall)
	}
	out := runForASecond(t, f)
	if c := out.Summary.Clock; c.Steps() == 0 || c.Lead() < 2900*time.Millisecond || !c.At(0).Equal(f.Start().UTC()) {
		t.Errorf("the summary's clock: %d moves, lead %v at the end, offset 0 at %v: want the step of 3 s, from the run's start %v", c.Steps(), c.Lead(), c.At(0), f.Start().UTC())
	}
	nodes := map[string]bool{}
	for _, m := range f.Members() {
		if m.Lost != "" || m.Started.IsZero() || m.Share != 100 {
			t.Errorf("member %+v", m)
		}
		nodes[m.Node] = true
	}
	if len(nodes) != 3 {
		t.Errorf("probers on %d nodes, want 3", len(nodes))
	}
	tot := f.Recorder().Totals()
	t.Logf("classes %v", tot.Classes)
	// The server's own count is the referee for the successes; on a busy
	// machine a few requests may time out, and those the server never
	// answered are not in it.
	if answered := srv.Counts().Answered; tot.Classes[prober.OK] != uint64(answered) || answered == 0 {
		t.Fatalf("merged %d ok of %d sent (%v); the server answered %d", tot.Classes[prober.OK], tot.Sent(), tot.Classes, answered)
	}
	if out.Summary.Start != f.Start() || out.Summary.Workers == 0 {
		t.Errorf("summary %+v", out.Summary)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := podsLeft(t, c); n != 0 {
		t.Fatalf("%d prober pods left after Close", n)
	}
}

// A prober pod that cannot pull its image is a start error naming the
// reason, and no pod is left behind.
func TestFleetBadImage(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	c := newCluster(t)
	c.waiting = "ErrImagePull"
	_, err := Launch(context.Background(), fleetConfig(t, c, srv, 2))
	if !errors.Is(err, ErrProberStart) || !strings.Contains(err.Error(), "ErrImagePull") {
		t.Fatalf("err = %v", err)
	}
	if n := podsLeft(t, c); n != 0 {
		t.Fatalf("%d prober pods left", n)
	}
	if srv.Counts().Requests != 0 {
		t.Fatal("requests were sent")
	}
}

// The pods are what the contract says: labelled with the run, spread over
// nodes, no service account token, non-root, bounded by a deadline, and
// nothing but the agent's flags in the spec (the configuration comes over
// the attach stream).
func TestProberPodSpec(t *testing.T) {
	s := PodSpec{Namespace: "ns", Image: "img", RunID: "abc", Count: 1, MaxDuration: 10 * time.Minute, StartTimeout: time.Minute}
	p := s.pod(0)
	if p.Labels[LabelRun] != "abc" || p.Labels[LabelName] != NameValue {
		t.Errorf("labels %v", p.Labels)
	}
	if *p.Spec.ActiveDeadlineSeconds != int64((15 * time.Minute).Seconds()) {
		t.Errorf("deadline %d", *p.Spec.ActiveDeadlineSeconds)
	}
	if *p.Spec.AutomountServiceAccountToken || !*p.Spec.SecurityContext.RunAsNonRoot || len(p.Spec.TopologySpreadConstraints) != 1 {
		t.Errorf("spec %+v", p.Spec)
	}
	args := strings.Join(p.Spec.Containers[0].Args, " ")
	if args != "fleet-agent --run-id abc.1 --max-duration 10m0s --start-timeout 1m0s" || !p.Spec.Containers[0].Stdin {
		t.Errorf("args %q", args)
	}
}

// Pods that run but cannot be attached to (attach forbidden, say): a
// launch error that says so, and no pod left.
func TestFleetAttachFails(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	c := newCluster(t)
	c.attachErr = errors.New("pods \"x\" is forbidden: cannot create resource \"pods/attach\"")
	_, err := Launch(context.Background(), fleetConfig(t, c, srv, 2))
	if err == nil || !strings.Contains(err.Error(), "ping") {
		t.Fatalf("err = %v", err)
	}
	if n := podsLeft(t, c); n != 0 {
		t.Fatalf("%d prober pods left", n)
	}
}

// Interrupted while the probers run: they are stopped, the outcome says
// canceled, and the merged counts still equal what the server answered.
func TestFleetInterrupted(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	c := newCluster(t)
	f, err := Launch(context.Background(), fleetConfig(t, c, srv, 2))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := f.Go(ctx)
	time.Sleep(500 * time.Millisecond)
	cancel()
	out := <-done
	if !out.Summary.Canceled {
		t.Errorf("summary %+v: not canceled", out.Summary)
	}
	tot := f.Recorder().Totals()
	if answered := uint64(srv.Counts().Answered); tot.Classes[prober.OK] != answered {
		t.Errorf("merged ok %d, the server answered %d", tot.Classes[prober.OK], answered)
	}
	if err := f.Close(); err != nil || podsLeft(t, c) != 0 {
		t.Fatalf("close: %v, %d pods left", err, podsLeft(t, c))
	}
}

// Probers whose clocks are off by seconds, either way: each offset is
// estimated to within its ping's round trip, every prober starts at the
// one moment on its own clock, and the merged run lands on the CLI's
// timeline (a result shifted by a wrong offset would fall before the
// run's start, or seconds away).
func TestFleetClockSkew(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	c := newCluster(t)
	c.skews = []time.Duration{5 * time.Second, -3 * time.Second, 0}
	f, err := Launch(context.Background(), fleetConfig(t, c, srv, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, m := range f.Members() {
		if d := m.ClockOffset - c.skews[i]; d > m.RTT || d < -m.RTT {
			t.Errorf("prober %d: offset estimated %v, its clock is off by %v (round trip %v)", i, m.ClockOffset, c.skews[i], m.RTT)
		}
	}
	done := f.Go(context.Background())
	time.Sleep(700 * time.Millisecond)
	f.Stop()
	out := <-done
	for _, m := range f.Members() {
		if m.Lost != "" {
			t.Fatalf("prober lost: %s", m.Lost)
		}
		if d := m.Started.Sub(f.Start()); d < -time.Second || d > time.Second {
			t.Errorf("prober %s started %v from the run's start on the CLI's clock", m.Pod, d)
		}
	}
	tot := f.Recorder().Totals()
	if answered := uint64(srv.Counts().Answered); tot.Classes[prober.OK] != answered || answered == 0 {
		t.Fatalf("merged ok %d, the server answered %d", tot.Classes[prober.OK], answered)
	}
	if out.Summary.Elapsed > 10*time.Second {
		t.Errorf("the merged run lasts %v: a skew was not taken out", out.Summary.Elapsed)
	}
}

// With Conntrack the pods run on the node's network as root with
// NET_ADMIN added to nothing else, and the agent is told to read
// conntrack; without it they stay unprivileged (TestProberPodSpec).
func TestProberPodSpecWithConntrack(t *testing.T) {
	s := PodSpec{Namespace: "ns", Image: "img", RunID: "abc", Count: 1, MaxDuration: 10 * time.Minute, StartTimeout: time.Minute, Conntrack: true}
	p := s.pod(0)
	c := p.Spec.Containers[0]
	if !p.Spec.HostNetwork || p.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet || *p.Spec.SecurityContext.RunAsUser != 0 || *p.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("pod spec %+v", p.Spec)
	}
	if caps := c.SecurityContext.Capabilities; len(caps.Add) != 1 || caps.Add[0] != "NET_ADMIN" || len(caps.Drop) != 1 || caps.Drop[0] != "ALL" {
		t.Errorf("capabilities %+v", caps)
	}
	if *c.SecurityContext.AllowPrivilegeEscalation || !*c.SecurityContext.ReadOnlyRootFilesystem || !strings.HasSuffix(strings.Join(c.Args, " "), " --conntrack") {
		t.Errorf("container %+v", c)
	}
}

// A namespace whose admission refuses host-network pods fails the launch
// before any pod is made, with a usage error that says what to do.
func TestConntrackProbersRefusedByPolicy(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	c := newCluster(t)
	c.refuse = apierrors.NewForbidden(corev1.Resource("pods"), "x", errors.New(`violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`))
	cfg := fleetConfig(t, c, srv, 2)
	cfg.Pods.Conntrack = true
	_, err := Launch(context.Background(), cfg)
	if !errors.Is(err, ErrProberPolicy) || !strings.Contains(err.Error(), "pod-security.kubernetes.io/enforce=privileged") || !strings.Contains(err.Error(), "hostNetwork") {
		t.Fatalf("err = %v", err)
	}
	if n := podsLeft(t, c); n != 0 || c.n.Load() != 0 || c.dryRuns.Load() != 1 {
		t.Fatalf("%d pods left, %d created, %d dry runs", n, c.n.Load(), c.dryRuns.Load())
	}
}

// Two paths side by side from two probers each: every pod probes its own
// path at its share of that path's rate, each path's recorder counts
// exactly what its server answered, the run's recorder is both (each
// result marked with its path), and the pods of a path carry its label.
func TestFleetProbesPathsSideBySide(t *testing.T) {
	healthy, failing := faultserver.New(t, "pod-a"), faultserver.New(t, "pod-b")
	c := newCluster(t)
	bad := okConfig(t, failing, 200)
	target, err := prober.ParseTarget(failing.URL("/status/503"))
	if err != nil {
		t.Fatal(err)
	}
	bad.Target = target
	cfg := fleetConfig(t, c, healthy, 2)
	cfg.Paths = []prober.Path{{Name: "svc", Config: okConfig(t, healthy, 300)}, {Name: "edge", Config: bad}}
	f, err := Launch(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	list, err := c.kube.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]int{}
	for _, p := range list.Items {
		labels[p.Labels[LabelPath]]++
		if sel := p.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels; sel[LabelPath] != p.Labels[LabelPath] {
			t.Errorf("pod %s spreads by %v, not by its path", p.Name, sel)
		}
	}
	if len(list.Items) != 4 || labels["0"] != 2 || labels["1"] != 2 {
		t.Fatalf("%d pods, by path label %v: want 2 for each of two paths", len(list.Items), labels)
	}
	out := runForASecond(t, f)
	for i, m := range f.Members() {
		wantPath, wantShare := i/2, []float64{150, 100}[i/2]
		if m.Path != wantPath || m.Share != wantShare || m.Lost != "" {
			t.Errorf("member %d: %+v, want path %d at %v req/s", i, m, wantPath, wantShare)
		}
	}
	recs := f.PathRecorders()
	svc, edge, all := recs[0].Totals(), recs[1].Totals(), f.Recorder().Totals()
	t.Logf("svc %v, edge %v", svc.Classes, edge.Classes)
	if answered := healthy.Counts().Answered; svc.Classes[prober.OK] != uint64(answered) || answered == 0 {
		t.Errorf("svc: %d ok (%v); its server answered %d", svc.Classes[prober.OK], svc.Classes, answered)
	}
	if answered := failing.Counts().Answered; edge.Classes[prober.HTTP5xx] != uint64(answered) || answered == 0 || edge.Classes[prober.OK] != 0 {
		t.Errorf("edge: %v; its server answered %d, every one a 503", edge.Classes, answered)
	}
	if all.Sent() != svc.Sent()+edge.Sent() || all.Classes[prober.OK] != svc.Classes[prober.OK] || all.Classes[prober.HTTP5xx] != edge.Classes[prober.HTTP5xx] {
		t.Errorf("the run's %v is not its paths' sum", all.Classes)
	}
	fails := f.Recorder().Failures()
	if len(fails) == 0 {
		t.Fatal("no failure kept")
	}
	for _, r := range fails {
		if r.Path != 1 || r.Source < 3 {
			t.Fatalf("a failure of path %d from source %d: the 503s are the edge's, from its probers (sources 3 and 4)", r.Path, r.Source)
		}
	}
	sums := f.PathSummaries()
	if len(sums) != 2 || sums[0].Target != 300 || sums[1].Target != 200 || out.Summary.Target != 500 || sums[0].Workers == 0 || sums[1].Workers == 0 {
		t.Errorf("path summaries %+v, run's %+v", sums, out.Summary)
	}
	// Where each path's probers sent their connections came over the
	// wire: each path its own server, the run both, once each.
	for i, want := range []string{fmt.Sprint("[", healthy.Addr(), "]"), fmt.Sprint("[", failing.Addr(), "]")} {
		if got := fmt.Sprint(sums[i].Dialled); got != want || sums[i].DialledMore {
			t.Errorf("path %d dialled %s (more %v), want %s", i, got, sums[i].DialledMore, want)
		}
	}
	if got, want := fmt.Sprint(out.Summary.Dialled), fmt.Sprint("[", healthy.Addr(), " ", failing.Addr(), "]"); got != want {
		t.Errorf("the run dialled %s, want %s", got, want)
	}
}

// Where a fleet's connections went is every prober's list, once each;
// unknown (no list) when one prober did not say it (a prober of an older
// rollprobe, or one lost before its end line), never the others' alone.
func TestFleetSummaryDialled(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.96.0.10:80"), netip.MustParseAddrPort("10.96.0.11:80")
	ended := func(path int, d *wire.Dialled) *member {
		return &member{Member: Member{Path: path}, end: &wire.End{Dialled: d}}
	}
	f := &Fleet{members: []*member{
		ended(0, wire.FromDialled([]netip.AddrPort{a}, false)),
		ended(0, wire.FromDialled([]netip.AddrPort{a, b}, false)),
		ended(1, wire.FromDialled([]netip.AddrPort{b}, false)),
		ended(1, nil), // an end without the field
	}}
	if s := f.summaryOf(0, 1, false); fmt.Sprint(s.Dialled) != fmt.Sprint([]netip.AddrPort{a, b}) || s.DialledMore {
		t.Errorf("path 0 dialled %v (more %v), want %v and %v", s.Dialled, s.DialledMore, a, b)
	}
	if s := f.summaryOf(1, 1, false); s.Dialled != nil || s.DialledMore {
		t.Errorf("path 1, one prober silent: dialled %v (more %v), want unknown", s.Dialled, s.DialledMore)
	}
	if s := f.summaryOf(-1, 1, false); s.Dialled != nil {
		t.Errorf("the run, one prober silent: dialled %v, want unknown", s.Dialled)
	}
	f.members[3].end = nil // lost before its end line
	if s := f.summaryOf(1, 1, false); s.Dialled != nil {
		t.Errorf("path 1, one prober lost: dialled %v, want unknown", s.Dialled)
	}
	f.members[3].end = &wire.End{Dialled: wire.FromDialled(nil, true)}
	if s := f.summaryOf(1, 1, false); fmt.Sprint(s.Dialled) != fmt.Sprint([]netip.AddrPort{b}) || !s.DialledMore {
		t.Errorf("path 1, one prober's list incomplete: dialled %v (more %v), want %v and more", s.Dialled, s.DialledMore, b)
	}
}
