// Package report is rollprobe's contract: the JSON report (schema
// rollprobe.report/v1, documented in report.schema.json) and the doctor's
// result (rollprobe.doctor/v1), the verdict (Judge, a pure function of the
// facts), the timeline event, the vocabulary (class names, severities,
// rollout statuses), and reading and writing reports. The field names are a
// contract with CI gates and other tools.
//
// It is a leaf: it imports no k8s.io package and no other rollprobe package
// than the leaf helpers beside it (exit codes, atomic files), so a program
// that reads rollprobe's reports imports it and nothing else. Renderings for
// people live in report/render; the domain packages fill these types.
package report

import (
	"strconv"
	"strings"
	"time"
)

// Schema identifies this version of the report format.
const Schema = "rollprobe.report/v1"

// Report is the JSON report. probe fills the core; run adds the rollout
// sections (omitted when empty).
type Report struct {
	Schema  string `json:"schema"`
	Tool    Tool   `json:"tool"`
	Command string `json:"command"`
	// Target and Config are the first path's when the run probed several
	// (Paths gives each path's target, connect_to, tls_roots and
	// grpc_client; Config.GRPCClient is then "both" if they differ).
	Target      string    `json:"target"`
	StartedAt   time.Time `json:"started_at"`
	EndedAt     time.Time `json:"ended_at"`
	DurationS   float64   `json:"duration_s"`
	Interrupted bool      `json:"interrupted"`
	// Clock: where the wall clock moved against the monotonic one during
	// the run (WallClock's samples); absent when it kept pace. Series
	// seconds are placed on the wall clock by it (SecondAt).
	Clock       []ClockLead `json:"clock,omitempty"`
	Config      Config      `json:"config"`
	Totals      Totals      `json:"totals"`
	LatencyMS   Quantiles   `json:"latency_ms"`
	ServiceMS   Quantiles   `json:"service_time_ms"`
	Prober      ProberStats `json:"prober"`
	Series      []SeriesRow `json:"series"`
	Failures    []Failure   `json:"failures"`
	FailureInfo FailureInfo `json:"failures_info"`
	Verdict     Verdict     `json:"verdict"`

	// Sections of rollprobe run.
	Rollout     *Rollout     `json:"rollout,omitempty"`
	Attribution *Attribution `json:"attribution,omitempty"`
	// Conntrack: whether the probing host's conntrack named each
	// connection's pod (rollprobe run probing from this process).
	Conntrack *Conntrack `json:"conntrack,omitempty"`
	// EdgeLog: what an ingress's access log (run --edge-access-log) said
	// of where it forwarded the run's requests.
	EdgeLog  *EdgeLog `json:"edge_log,omitempty"`
	Timeline []Event  `json:"timeline,omitempty"`
	// ViewStalls: spans in which rollprobe's view of the cluster was not
	// known to be live (rollprobe run; measured while the rollout was
	// followed, see Attribution.RevisionMarks).
	ViewStalls []ViewStall `json:"view_stalls,omitempty"`
	Outages    []Outage    `json:"outages,omitempty"`
	// NodeGaps: the entry nodes' gaps without a serving local endpoint
	// (externalTrafficPolicy: Local, a NodePort target: each path's own),
	// node by node.
	NodeGaps []NodeGap    `json:"node_gaps,omitempty"`
	Pods     []PodTraffic `json:"pods,omitempty"`
	Findings []Finding    `json:"findings,omitempty"`
	// Probers: the in-cluster probers the run probed from (run --probers).
	Probers []ProberInfo `json:"probers,omitempty"`
	// Paths, when the run probed several targets side by side (--target
	// NAME=URL, repeated), is each one's own measurements; the sections
	// above are all of them together (totals added, latencies merged,
	// failures marked with their path), and the verdict fails if any path
	// does.
	Paths []PathReport `json:"paths,omitempty"`
}

// PathReport is one path's part of a run that probed several.
type PathReport struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	// RunID prefixes this path's request IDs (each path's prober numbers
	// its own requests): find its requests in a proxy's log.
	RunID     string `json:"run_id"`
	ConnectTo string `json:"connect_to,omitempty"`
	TLSRoots  string `json:"tls_roots,omitempty"`
	// GRPCClient: who made this path's gRPC calls (--grpc-client both
	// probes one target as two paths, raw and grpc-go).
	GRPCClient string `json:"grpc_client,omitempty"`
	// Entry is how this path's target (its ConnectTo when set) reaches
	// the run's Service with no HTTP proxy between: its cluster IP (by
	// address or by its cluster DNS name), a node port, its load
	// balancer's address; a name by the addresses its connections were
	// sent to (Prober.Dialled) when recorded; nil when that is not known
	// (another name, an address of nothing the run saw: an ingress, a
	// proxy). The first path's is Rollout.Entry too.
	Entry     *Entry      `json:"entry,omitempty"`
	Totals    Totals      `json:"totals"`
	LatencyMS Quantiles   `json:"latency_ms"`
	ServiceMS Quantiles   `json:"service_time_ms"`
	Prober    ProberStats `json:"prober"`
	Series    []SeriesRow `json:"series"`
	Outages   []Outage    `json:"outages"`
	// Pods, for rollprobe run, are the pods as this path saw them: the
	// responses each served on it.
	Pods []PodTraffic `json:"pods,omitempty"`
	// Verdict is the path's own: its failures against the budget, its
	// rate held, its redirects.
	Verdict Verdict `json:"verdict"`
}

// ProberInfo is one in-cluster prober: where it ran, its part of the load,
// what it measured, its clock, and whether its results are complete.
type ProberInfo struct {
	Pod  string `json:"pod"`
	Node string `json:"node"`
	// Path is the name of the path it probed, when the run probed several
	// side by side (each path has its own probers).
	Path string `json:"path,omitempty"`
	// RunID prefixes its request IDs (<run_id>-<seq>): each prober numbers
	// its own. Empty when it never started.
	RunID    string            `json:"run_id,omitempty"`
	ShareRPS float64           `json:"share_rps"`
	Sent     uint64            `json:"sent"`
	OK       uint64            `json:"ok"`
	Failed   uint64            `json:"failed"`
	ByClass  map[string]uint64 `json:"by_class"` // failures only, non-zero only
	// ClockOffsetMS is its clock minus the CLI's, estimated from the ping
	// with the shortest round trip (ClockRTTMS); its times in this report
	// are on the CLI's clock.
	ClockOffsetMS float64    `json:"clock_offset_ms"`
	ClockRTTMS    float64    `json:"clock_rtt_ms"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	// Status is ProberOK or ProberLost; Lost says why and LostAt when.
	Status string     `json:"status"`
	Lost   string     `json:"lost,omitempty"`
	LostAt *time.Time `json:"lost_at,omitempty"`
}

// Prober statuses.
const (
	ProberOK   = "ok"
	ProberLost = "lost" // its results are incomplete: the run is inconclusive
)

// Attribution says how failures were matched to the pods that caused them,
// and how sure that is.
type Attribution struct {
	// ReceiveToleranceMS bounds how long before rollprobe received a
	// change (its watch's delivery delay) the change may already have
	// acted: a failure is put on a pod only if the pod's change was
	// received no later than this after the failure began.
	ReceiveToleranceMS float64 `json:"receive_tolerance_ms"`
	// ToleranceSource says how the tolerance was measured.
	ToleranceSource string `json:"tolerance_source"`
	// Kept failures (local errors aside) by how they were attributed:
	// to one pod for certain, among several candidates, or to none.
	Certain      int `json:"certain"`
	Ambiguous    int `json:"ambiguous"`
	Unattributed int `json:"unattributed"`
	// RevisionMarks is how many pods lists dated the apiserver's order of
	// writes (one every RevisionMarkPeriodMS while the rollout was
	// followed), and DeletionsOrdered how many deletions they bounded:
	// a deletion with a version above a mark's was made after the mark
	// was sent (see rollout.RevisionClock).
	RevisionMarks        int     `json:"revision_marks"`
	RevisionMarkPeriodMS float64 `json:"revision_mark_period_ms,omitempty"`
	DeletionsOrdered     int     `json:"deletions_ordered"`
}

// Outage is a contiguous burst of failed requests: from the first
// failure's intended send time to the last one's (the one definition every
// output uses).
type Outage struct {
	Start     time.Time         `json:"start"`
	End       time.Time         `json:"end"`
	DurationS float64           `json:"duration_s"`
	Count     int               `json:"count"`
	ByClass   map[string]uint64 `json:"by_class"`
	// SlowConnects: successful requests begun in the outage's seconds that
	// needed a retransmitted SYN (1 s resolution: whole series rows).
	SlowConnects uint64 `json:"slow_connects,omitempty"`
	// Context says what the pods were doing around it.
	Context string `json:"context,omitempty"`
	// Pods are the pods its failures were put on (their likely_pod), most
	// failures first: where the outage happened, by the same evidence as
	// each failure's. Count less their sum failed on no pod (an edge's own
	// refusal, a Service with no endpoint), on none named, or were not kept
	// in full (failures_info: only kept failures are put on pods). Absent
	// when no failure in it names a pod.
	Pods []OutagePod `json:"pods,omitempty"`
}

// OutagePod is the part of an outage's failures put on one pod.
type OutagePod struct {
	Pod string `json:"pod"`
	// Failures is how many of the outage's failures name it as their
	// likely_pod; Certain how many of them with confidence 1 (conntrack,
	// the edge's log, a backend header, or the only pod the timeline
	// leaves).
	Failures int `json:"failures"`
	Certain  int `json:"certain"`
}

// PodTraffic is one pod's part in the run.
type PodTraffic struct {
	Pod       string     `json:"pod"`
	Revision  string     `json:"revision,omitempty"`
	Node      string     `json:"node,omitempty"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	DeletedAt *time.Time `json:"deletion_requested_at,omitempty"`
	GoneAt    *time.Time `json:"gone_at,omitempty"`
	ExitCode  *int32     `json:"exit_code,omitempty"`
	// Served counts responses naming this pod (--backend-header);
	// ServedAfterDeletion those in the seconds after its deletion was
	// requested (1 s resolution: whole rows of the series).
	Served              uint64 `json:"served"`
	ServedAfterDeletion uint64 `json:"served_after_deletion"`
	// ServedConntrack counts the responses on connections conntrack saw
	// go to its address while it bore it (Conntrack.Responses): known
	// without a backend header. Absent when conntrack mapped no response;
	// a lower bound when Conntrack.ResponsesUnmapped is not 0.
	ServedConntrack *uint64 `json:"served_conntrack,omitempty"`
	// ServedAccessLog counts the responses the edge's access log says it
	// forwarded to its address while it bore it (EdgeLog.Responses):
	// known without a backend header; a lower bound, as the pod's own 5xx
	// answers are not told from the edge's and are left out. Absent when
	// no log was read or it named no response of this run on a pod.
	ServedAccessLog *uint64 `json:"served_access_log,omitempty"`
	// EdgeFailedAttempts counts the attempts the edge's log lists as
	// failed on its address while it bore it, before the edge sent their
	// requests to another backend (EdgeLog.FailedAttempts): failures its
	// clients never saw. Absent when the log does not list such attempts
	// (no log read, Traefik's, or its retries not counted: unknown, not 0).
	EdgeFailedAttempts *uint64 `json:"edge_failed_attempts,omitempty"`
	// FirstServedS and LastServedS are the seconds of the series (t) of
	// the first and the last response naming it; absent when none did.
	// Per path, LastServedS against the deletion says how long that path
	// kept sending to the pod after it was deleted.
	FirstServedS *int64 `json:"first_served_s,omitempty"`
	LastServedS  *int64 `json:"last_served_s,omitempty"`
}

// Finding explains a cause with evidence and a concrete fix.
type Finding struct {
	ID       string   `json:"id"`
	Severity Severity `json:"severity"`
	Title    string   `json:"title"`
	Evidence []string `json:"evidence"`
	Fix      string   `json:"fix"`
	Pods     []string `json:"pods,omitempty"`
	// Source is SourceDoctor for a static check of the configuration;
	// empty (SourceTraffic) for what the run's traffic showed.
	Source Source `json:"source,omitempty"`
}

// ChangeKind is what a run's trigger changed.
type ChangeKind string

const (
	// ChangeRevision: a new pod template (restart, set image, a patch's,
	// a deploy command's, a watched rollout); old pods replaced by new.
	// A change the run saw without telling it from a scale (a Rollout
	// whose template is another object's) is said as one.
	ChangeRevision ChangeKind = "revision"
	// ChangeDrain: a node drained; the workload unchanged, its pods there
	// evicted and replaced elsewhere.
	ChangeDrain ChangeKind = "drain"
	// ChangeScale: the replicas alone (--scale, a watched autoscaler's or
	// kubectl scale, a patch or a deploy command that changed nothing
	// else); a scale-in removes pods, a scale-out adds them.
	ChangeScale ChangeKind = "scale"
)

// Rollout is what happened to the workload during a run.
type Rollout struct {
	Namespace string `json:"namespace"`
	// Kind and Name are the workload's ("Deployment", "StatefulSet",
	// "DaemonSet", "Rollout" for an Argo Rollout); absent in older
	// reports, which were all Deployments.
	Kind string `json:"kind,omitempty"`
	Name string `json:"name,omitempty"`
	// Deployment is the name when Kind is Deployment, "" otherwise.
	Deployment string `json:"deployment"`
	Service    string `json:"service"`
	Trigger    string `json:"trigger"`
	// Change is what the trigger changed, which decides how the pods
	// went away: a new revision, a drain, a scale. Empty when the run
	// did not learn it (a watch that met nothing or began mid-rollout, a
	// --patch or --exec that changed nothing, a learnt change that ended
	// on the revision it began at) and in older reports; code reads it,
	// never Trigger's words.
	Change ChangeKind    `json:"change,omitempty"`
	Status RolloutStatus `json:"status"`
	// ServerVersion is the cluster's Kubernetes version ("1.36"), which
	// the advice is written for; empty if it could not be read.
	ServerVersion string `json:"server_version,omitempty"`
	// TemplateFrom names the object the workload's pod template is read
	// from and the trigger wrote ("deployment web"), when that is not the
	// workload itself: an Argo Rollout's spec.workloadRef.
	TemplateFrom string `json:"template_from,omitempty"`
	// TriggerSeenAfterMS is the time from sending the trigger's write to
	// receiving its change through the watch: an upper bound on the
	// watch's delivery delay (0 when the trigger wrote nothing itself; for
	// a workloadRef, until the Rollout showed the change, which Argo's
	// controller writes there).
	TriggerSeenAfterMS float64    `json:"trigger_seen_after_ms,omitempty"`
	Message            string     `json:"message,omitempty"`
	OldRevision        string     `json:"old_revision,omitempty"`
	NewRevision        string     `json:"new_revision,omitempty"`
	TriggeredAt        *time.Time `json:"triggered_at,omitempty"`
	CompleteAt         *time.Time `json:"complete_at,omitempty"`
	OldPodsGoneAt      *time.Time `json:"old_pods_gone_at,omitempty"`
	// The Service as the run found it: its type, and the policy that
	// keeps traffic entering a node on that node's own endpoints.
	ServiceType           string `json:"service_type,omitempty"`
	ExternalTrafficPolicy string `json:"external_traffic_policy,omitempty"`
	HealthCheckNodePort   int32  `json:"health_check_node_port,omitempty"`
	// PublishNotReadyAddresses: the Service lists every pod's endpoint as
	// ready from the pod's start and while it terminates, whatever its
	// readiness: traffic reaches a pod from its start until it is gone.
	PublishNotReadyAddresses bool `json:"publish_not_ready_addresses,omitempty"`
	// Entry is how the target reaches the Service; nil when it is not
	// known (a name other than the Service's cluster DNS name, an address
	// of nothing the run saw).
	Entry *Entry `json:"entry,omitempty"`
	// Steps are an Argo canary's steps as the run saw them, each with its
	// own verdict; absent for the other kinds and strategies.
	Steps []CanaryStep `json:"steps,omitempty"`
}

// CanaryStep is one step of an Argo canary, from the controller's
// status (the timeline's rollout_step events) to the next step, and what
// the traffic did meanwhile, by whole seconds of the series (each second
// counted in the step in force when it began).
type CanaryStep struct {
	// Index is the step's (status.currentStepIndex, from 0); the last one,
	// Index = the number of steps, is the promotion to every pod.
	Index int `json:"index"`
	// Step is the step as the Argo plugin names it ("setWeight: 25",
	// "pause", "pause: 10s", "analysis"), or "full promotion".
	Step string `json:"step"`
	// Weight is the canary weight the Rollout declared in force, percent.
	Weight int `json:"weight"`
	// StartS and EndS bound it, in seconds from the run's start.
	StartS float64 `json:"start_s"`
	EndS   float64 `json:"end_s"`
	Sent   uint64  `json:"sent"`
	Failed uint64  `json:"failed"`
	// Pass: its failures are within the run's budget.
	Pass bool `json:"pass"`
	// Named counts the responses that named their pod (the backend
	// header); NewSharePct is the share of them from the new revision's
	// pods. Absent when no response named one: unknown, not 0.
	Named       uint64   `json:"named,omitempty"`
	NewSharePct *float64 `json:"new_share_pct,omitempty"`
}

// WorkloadKind is the workload's kind, "Deployment" for older reports.
func (r *Rollout) WorkloadKind() string {
	if r.Kind == "" {
		return "Deployment"
	}
	return r.Kind
}

// WorkloadName is the workload's name (older reports: the Deployment's).
func (r *Rollout) WorkloadName() string {
	if r.Name == "" {
		return r.Deployment
	}
	return r.Name
}

// Workload names the workload as kubectl writes it: "deployment NS/NAME".
func (r *Rollout) Workload() string {
	return strings.ToLower(r.WorkloadKind()) + " " + r.Namespace + "/" + r.WorkloadName()
}

// Entry is how the probed target reaches the Service.
type Entry struct {
	// Via: "cluster_ip", "node_port" (a node's address and one of the
	// Service's node ports) or "load_balancer" (an ingress IP of its
	// status).
	Via string `json:"via"`
	// Node, for node_port, is the node the target's address belongs to
	// (known from the pods the run saw there; "" if none ran there).
	Node string `json:"node,omitempty"`
	Port int32  `json:"port,omitempty"`
	// From says what it was read from: EntryFromTarget (the target's
	// address, or its cluster DNS name's spec) or EntryFromDialled (the
	// addresses a name's connections were sent to, every one the same
	// way in).
	From string `json:"from,omitempty"`
}

// Ways a target reaches a Service (Entry.Via).
const (
	ViaClusterIP    = "cluster_ip"
	ViaNodePort     = "node_port"
	ViaLoadBalancer = "load_balancer"
)

// What an Entry was read from (Entry.From).
const (
	EntryFromTarget  = "target"
	EntryFromDialled = "dialled"
)

// NodeGap is a time an entry node had no serving endpoint of the Service
// while its externalTrafficPolicy was Local: kube-proxy there had nowhere
// to send what entered (it does not forward to other nodes under Local).
type NodeGap struct {
	Node  string    `json:"node"`
	Start time.Time `json:"start"`
	// End is when an endpoint on the node served again; the run's end if
	// none did (Open).
	End  time.Time `json:"end"`
	Open bool      `json:"open,omitempty"`
	// StoppedServing is the pod whose endpoint stopped serving at Start;
	// ServingAgain the one that served at End.
	StoppedServing string `json:"stopped_serving,omitempty"`
	ServingAgain   string `json:"serving_again,omitempty"`
	// ReadyElsewhere are pods ready on other nodes meanwhile: capacity the
	// Local policy kept out of reach.
	ReadyElsewhere []string `json:"ready_elsewhere,omitempty"`
	// Failed counts the failures the analysis placed in the gap.
	Failed int `json:"failed"`
}

// ViewStall is a span longer than ViewStallBound in which no pods list of
// the revision clock answered and no watch delivered anything: the API
// server frozen, overloaded or cut off. Whatever changed in it was
// received at its end or later, so a failure begun in it is attributed
// from the timeline with changes received up to the stall's end counted
// as possibly before it (the widened bound); the kernel's conntrack record
// and the backend header do not depend on the view and are unaffected.
type ViewStall struct {
	Start time.Time `json:"start"`
	// End is the first sign of life after it: a list's answer or a watch's
	// event; the time the view stopped being watched when Open.
	End       time.Time `json:"end"`
	DurationS float64   `json:"duration_s"`
	Open      bool      `json:"open,omitempty"`
	// Failures begun in it; Widened of them were attributed from the
	// timeline with the widened bound, the others by conntrack or the
	// backend header (or to no pod).
	Failures int `json:"failures"`
	Widened  int `json:"widened"`
}

// ViewStallBound is how long the view may go without a sign of life before
// it counts as stalled: twenty revision-clock periods, well above a loaded
// lab's slowest list (a few hundred ms).
const ViewStallBound = 2 * time.Second

// Tool names the program that wrote the report.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Config is the probe configuration the report was made with.
type Config struct {
	RunID  string `json:"run_id"`
	Method string `json:"method"`
	Conn   string `json:"conn"`
	// Protocol is what the prober spoke: http1, or h2 (ALPN h2 on https,
	// prior knowledge on http). Absent in reports before it was recorded:
	// http1.
	Protocol string `json:"protocol,omitempty"`
	// Connections, on h2 with kept-alive connections, is how many the
	// prober kept open (requests took them in turn).
	Connections int `json:"connections,omitempty"`
	// Streams, on h2 and grpc, is the prober's cap on streams in flight
	// per connection (--streams); absent: the server's limit.
	Streams int `json:"streams,omitempty"`
	// GRPCMethod, on grpc, is the method every request called;
	// GRPCClient who made the calls: raw (rollprobe's own streams, every
	// attempt counted) or grpc-go (grpc-go itself, its hidden retries
	// counted apart).
	GRPCMethod       string  `json:"grpc_method,omitempty"`
	GRPCClient       string  `json:"grpc_client,omitempty"`
	Model            Model   `json:"model"`
	Rate             float64 `json:"rate"`
	Concurrency      int     `json:"concurrency,omitempty"`
	DurationS        float64 `json:"duration_s"`
	TimeoutMS        float64 `json:"timeout_ms"`
	ConnectTimeoutMS float64 `json:"connect_timeout_ms"`
	ExpectStatus     string  `json:"expect_status"`
	BackendHeader    string  `json:"backend_header,omitempty"`
	ConnectTo        string  `json:"connect_to,omitempty"`
	TLSRoots         string  `json:"tls_roots,omitempty"`
	RequestIDHeader  string  `json:"request_id_header"`
	MaxFailures      uint64  `json:"max_failures"`
	MaxFailureRate   float64 `json:"max_failure_rate"`
}

// Totals count every attempt that had an outcome.
type Totals struct {
	Sent   uint64 `json:"sent"`
	OK     uint64 `json:"ok"`
	Failed uint64 `json:"failed"` // target failures; local errors are in prober.local_errors
	// ByClass has every class name as a key, zero counts included.
	ByClass  map[string]uint64 `json:"by_class"`
	ByStatus map[string]uint64 `json:"by_status"`
	// ByBackend counts responses by the backend header's value.
	ByBackend         map[string]uint64 `json:"by_backend"`
	FreshConnections  uint64            `json:"fresh_connections"`
	ReusedConnections uint64            `json:"reused_connections"`
	// HiddenRetries, when grpc-go made the calls (config.grpc_client
	// grpc-go or both), is what it resent on its own; absent otherwise
	// (not measured). With --grpc-client both it is the grpc-go path's
	// (each path's own is in its PathReport).
	HiddenRetries *HiddenRetries `json:"hidden_retries,omitempty"`
	// SlowConnects counts requests that succeeded only after a SYN was
	// retransmitted (connect took about 1 s or more): the latency spikes
	// the same race causes when a SYN goes to an IP that no longer answers.
	SlowConnects uint64 `json:"slow_connects,omitempty"`
	// EOFBeforeRequest and EOFAfterRequest split the eof and eof_reused
	// failures by server_close: the keep-alive race (the request never
	// reached a listening socket; nothing was processed) and cuts in
	// flight. Failures the kernel could not place are in neither.
	EOFBeforeRequest uint64 `json:"eof_before_request"`
	EOFAfterRequest  uint64 `json:"eof_after_request"`
}

// HiddenRetries are grpc-go's transparent retries: streams a GOAWAY left
// unprocessed or the server refused, resent without its caller knowing.
type HiddenRetries struct {
	// Calls had at least one; Attempts is how many there were in all.
	Calls    uint64 `json:"calls"`
	Attempts uint64 `json:"attempts"`
	// AddedMSMean and AddedMSMax: how much later than its first attempt
	// a retried call's last attempt began, over the retried calls.
	AddedMSMean float64 `json:"added_ms_mean"`
	AddedMSMax  float64 `json:"added_ms_max"`
}

// Quantiles of a latency distribution in milliseconds, over requests that
// received a complete response (any status).
type Quantiles struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// ProberStats say whether the prober itself kept up.
type ProberStats struct {
	TargetRate       float64 `json:"target_rate"`
	AchievedRate     float64 `json:"achieved_rate"`
	MaxScheduleLagMS float64 `json:"max_schedule_lag_ms"`
	Workers          int     `json:"workers"`
	// Procs is the Ps (GOMAXPROCS) the prober ran on, at the end: in the
	// closed model, chosen by measuring unless set (--procs, GOMAXPROCS).
	Procs int `json:"procs,omitempty"`
	// Engine is how the prober drove its requests: "loops" (event loops
	// over non-blocking sockets) or "goroutines" (Go's net package: TLS,
	// names). Both record the same outcome for the same exchange.
	Engine      string `json:"engine,omitempty"`
	LocalErrors uint64 `json:"local_errors"`
	// Canceled: in-flight attempts cut by an interruption; no outcome.
	Canceled uint64  `json:"canceled"`
	SendingS float64 `json:"sending_s"`
	// StartSpreadMS, when probing from the cluster: from the first
	// prober's start to the last one's.
	StartSpreadMS float64 `json:"start_spread_ms,omitempty"`
	// Dialled are the distinct addresses the run's connections were sent
	// to, this process's or every in-cluster prober's (ip:port, in the
	// order first seen, at most 8; DialledMore when there were more): what
	// a target's name resolved to, as dialled. Absent when not known (a
	// prober of an older rollprobe, or one lost before it said).
	Dialled     []string `json:"dialled,omitempty"`
	DialledMore bool     `json:"dialled_more,omitempty"`
}

// SeriesRow is one second of the run: Sent counts requests begun in it,
// the rest requests completed in it. T counts the run's seconds on the
// monotonic clock; WallClock.SecondAt places one on the wall clock, where
// the timeline and the failures are. Every per-second count of a report
// (the edge log's, conntrack's responses) is by these seconds.
type SeriesRow struct {
	T       int64             `json:"t"`
	Sent    uint64            `json:"sent"`
	OK      uint64            `json:"ok"`
	Failed  uint64            `json:"failed"`
	ByClass map[string]uint64 `json:"by_class,omitempty"` // failures only, non-zero only
	// P50MS and P99MS: latency from the intended send time of the
	// responses completed in the second; ServiceP50MS and ServiceP99MS:
	// their service time, from the actual send (absent in older reports).
	P50MS        float64 `json:"p50_ms"`
	P99MS        float64 `json:"p99_ms"`
	ServiceP50MS float64 `json:"service_p50_ms,omitempty"`
	ServiceP99MS float64 `json:"service_p99_ms,omitempty"`
	// OKServiceP99MS: the service time p99 of the successes alone;
	// absent when none completed in the second (or in older reports).
	OKServiceP99MS float64 `json:"ok_service_p99_ms,omitempty"`
	// OKAfterWriteP99MS: the same successes' p99 from their request's
	// write, a new connection's opening (TCP, TLS) left out: what the
	// server and anything in front of it took (a proxy's retries), not a
	// slow handshake. Absent when none completed (or in older reports).
	OKAfterWriteP99MS float64           `json:"ok_after_write_p99_ms,omitempty"`
	MaxLagMS          float64           `json:"max_lag_ms"`
	Backends          map[string]uint64 `json:"backends,omitempty"`
	// SlowConnects: requests begun in the second that succeeded only
	// after a retransmitted SYN.
	SlowConnects uint64 `json:"slow_connects,omitempty"`
}

// Evidence values (Failure.Evidence): what named the failure's pod.
const (
	EvidenceConntrack     = "conntrack"
	EvidenceAccessLog     = "access_log"
	EvidenceBackendHeader = "backend_header"
	EvidenceTimeline      = "timeline"
)

// EdgeLog is what an ingress's access log said of the run's requests
// (run --edge-access-log): read after the rollout, its lines picked by the
// run's request IDs.
type EdgeLog struct {
	// File is the log read; Format its format (edgelog's: "traefik",
	// Traefik's JSON access log with the request ID header kept; "nginx",
	// nginx's in edgelog.NginxLogFormat; "auto" when no line of the run's
	// requests told which).
	File   string `json:"file"`
	Format string `json:"format"`
	// Requests is how many of the run's requests it has a line for;
	// RequestsByPath the same by path, when the run probed several (a path
	// with none did not go through this edge).
	Requests       int            `json:"requests"`
	RequestsByPath map[string]int `json:"requests_by_path,omitempty"`
	// Unreadable counts lines naming one of the run's request IDs that
	// were not a JSON object (cut short); Duplicates the request IDs found
	// on more than one line (left out: never a guess).
	Unreadable int `json:"unreadable,omitempty"`
	Duplicates int `json:"duplicates,omitempty"`
	// FailuresFound counts the failures it has a line for that names the
	// address the request was forwarded to; FailuresNotFound those that
	// got past the edge's handshake (it must have logged them) without a
	// line: their pod is inferred.
	FailuresFound    int `json:"failures_found"`
	FailuresNotFound int `json:"failures_not_found"`
	// FailuresNoBackend counts the failures it has a line for that names
	// no backend (Failure.EdgeNoBackend): the edge answered them itself.
	FailuresNoBackend int `json:"failures_no_backend,omitempty"`
	// Retried, where the log lists every backend the edge tried in turn
	// (nginx's), counts the run's requests it sent to more than one, each
	// attempt but the last failed: drops the client never saw, only
	// waited for. Absent where the log names only the last (Traefik's):
	// not known.
	Retried *int `json:"retried,omitempty"`
	// FailedAttempts are the attempts of those retried requests that
	// failed before the edge tried another backend (Entry.FailedOn), by
	// backend address and the second of the run the edge received the
	// request in (the log's time, placed by the run's clock): which pods
	// failed requests the clients never saw fail. Absent when none
	// failed, and where Retried is absent (not known).
	FailedAttempts []EdgeFailedAttempts `json:"failed_attempts,omitempty"`
	// Error says why the log could not be read, when it could not.
	Error string `json:"error,omitempty"`
	// Responses are the run's requests the edge forwarded, the backend
	// answered below 500 (a 5xx may be the edge's own: Traefik logs its
	// own 502 with an origin status too) and the client got the answer of
	// (not 499), by backend address and
	// second of the run the edge received them in (the log's time, placed
	// by the run's clock):
	// what each pod served, known without a backend header
	// (PodTraffic.ServedAccessLog).
	Responses []EdgeResponses `json:"responses,omitempty"`
	// Waits are the run's requests that waited inside the edge, outside
	// the attempt that answered them, at least EdgeWaitFloor (Traefik's
	// Overhead): failed attempts and a retry's backoff, a drop the client
	// never saw (it saw the wait); by path and second.
	Waits []EdgeWaits `json:"waits,omitempty"`
}

// EdgeWaitFloor is the least wait inside the edge, outside the attempt
// that answered, that EdgeLog.Waits counts: far above an edge's own work
// on a request (microseconds), and what a failed attempt or a retry's
// backoff costs (a dial timeout, a backoff of tens of milliseconds and
// more); the latency-spike finding's floor.
const EdgeWaitFloor = 100 * time.Millisecond

// EdgeWaits counts the requests of one path that waited at least
// EdgeWaitFloor inside the edge outside the attempt that answered them, in
// one second of the run (the log's time, placed by the run's clock).
type EdgeWaits struct {
	Path     string `json:"path,omitempty"`
	T        int64  `json:"t"`
	Requests int    `json:"requests"`
}

// EdgeResponses counts the responses of one backend address in one second.
type EdgeResponses struct {
	Addr      string `json:"addr"`
	T         int64  `json:"t"`
	Responses uint64 `json:"responses"`
}

// EdgeFailedAttempts counts the attempts that failed on one backend
// address, of requests the edge received in one second of the run (T,
// the series' second) and then sent on to another backend.
type EdgeFailedAttempts struct {
	Addr     string `json:"addr"`
	T        int64  `json:"t"`
	Attempts uint64 `json:"attempts"`
}

// Conntrack says whether the probing host's conntrack was read for where
// each connection went (the pod kube-proxy chose), and what it missed.
type Conntrack struct {
	Watching bool `json:"watching"`
	// Reason says why it was not (no CAP_NET_ADMIN, not Linux, ...).
	Reason string `json:"reason,omitempty"`
	// Connections: connections to the probed port seen created.
	Connections int `json:"connections"`
	// Lost: the kernel dropped events; LostReason says how.
	Lost       bool   `json:"lost,omitempty"`
	LostReason string `json:"lost_reason,omitempty"`
	// FailuresMapped and FailuresUnmapped count the failures with a
	// connection (a local address) whose pod address was found, and not
	// (no event, or an ambiguous one: natwatch.Table.Find).
	FailuresMapped   int `json:"failures_mapped"`
	FailuresUnmapped int `json:"failures_unmapped"`
	// FailuresNoEntry counts the failures conntrack shows left no entry
	// (Failure.NoConntrackEntry): refused by the probing host's own rules.
	// Counted in neither of the two above.
	FailuresNoEntry int `json:"failures_no_entry,omitempty"`
	// FailuresJoined counts the mapped failures whose SYN joined an
	// earlier unanswered connection's entry (Failure.JoinedConntrackEntry).
	FailuresJoined int `json:"failures_joined,omitempty"`
	// Why the unmapped were (FailuresUnmapped counts them all):
	// FailuresAmbiguous, their window held connections from their port to
	// their address that went to different pods (natwatch.Table.Ambiguous);
	// FailuresFollowed, no event of their own, and the port's earlier
	// connection left an entry their SYN most likely followed
	// (Failure.PriorPodAddr); the rest, no event in their window at all.
	FailuresAmbiguous int `json:"failures_ambiguous,omitempty"`
	FailuresFollowed  int `json:"failures_followed,omitempty"`
	// EventLagMaxMS is the longest the watch went between two reads of
	// the kernel's events (the longest of the probers'): an event is
	// received, and stamped, at most that long after its SYN, and one
	// stamped over a second after it is outside its connection's window.
	// Absent when the watch read nothing.
	EventLagMaxMS *float64 `json:"event_lag_max_ms,omitempty"`
	// StaleEntries counts the entries conntrack held when the watch began
	// of unanswered connections from the probing host to the probed port:
	// an earlier process's (a previous run's), each of which a new
	// connection from its source port to its address would join, to
	// wherever it went. Nil when they could not be listed
	// (StaleEntriesReason says why). StalePortsHeld: how many of their
	// source ports the run kept from its own connections until the entry
	// ended (a port another socket had bound could not be).
	StaleEntries       *int   `json:"stale_entries,omitempty"`
	StaleEntriesReason string `json:"stale_entries_reason,omitempty"`
	StalePortsHeld     int    `json:"stale_ports_held,omitempty"`
	// Responses are the responses the prober counted, by the address
	// their connection went to after NAT and the second of the run (t)
	// it was dialled in (the pod that bore the address then served them);
	// ResponsesUnmapped those on connections conntrack gave no (or an
	// ambiguous) address for. In-cluster probers send theirs (wire.Nat);
	// absent for gRPC through grpc-go (it owns its connections).
	Responses         []ConntrackResponses `json:"responses,omitempty"`
	ResponsesUnmapped uint64               `json:"responses_unmapped,omitempty"`
}

// ConntrackResponses counts responses on connections to one address,
// dialled in one second of the run.
type ConntrackResponses struct {
	Addr        string `json:"addr"`
	T           int64  `json:"t"`
	Connections uint64 `json:"connections"`
	Responses   uint64 `json:"responses"`
}

// Values of Failure.RefusedBy.
const (
	// RefusedByICMP: an ICMP port unreachable refused the SYN (Failure.ICMP
	// names its sender): a host's reject rule, as kube-proxy's for a
	// Service address it holds no endpoint for; a TCP stack answers with
	// a reset instead.
	RefusedByICMP = "icmp"
	// RefusedByRST: a TCP reset refused it: the SYN reached a TCP stack
	// with nothing listening on its port (a pod not, or no longer,
	// listening), not a reject rule.
	RefusedByRST = "rst"
)

// ICMPError is an ICMP (or ICMPv6) error a failed connect received.
type ICMPError struct {
	// From is its sender's address.
	From string `json:"from"`
	Type int    `json:"type"`
	Code int    `json:"code"`
	// Name says what it is ("port unreachable", "host unreachable"), or
	// its family, type and code.
	Name string `json:"name"`
	V6   bool   `json:"v6,omitempty"`
}

// Failure is one failed attempt in full.
type Failure struct {
	Seq       uint64    `json:"seq"`
	RequestID string    `json:"request_id"`
	Class     string    `json:"class"`
	Phase     string    `json:"phase"`
	Intended  time.Time `json:"intended"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	// AtMS is the intended send time as milliseconds since the run started.
	AtMS         float64 `json:"at_ms"`
	LatencyMS    float64 `json:"latency_ms"`
	Status       int     `json:"status,omitempty"`
	Fresh        bool    `json:"fresh"`
	ConnRequests uint32  `json:"conn_requests"`
	ConnAgeMS    float64 `json:"conn_age_ms"`
	Backend      string  `json:"backend,omitempty"`
	Error        string  `json:"error,omitempty"`
	// LocalAddr and RemoteAddr are the failed request's connection's two
	// ends (ip:port), fresh or reused, to find it in conntrack, a packet
	// capture or server logs. When the connect failed, the address its
	// SYN left from (the kernel keeps the source it chose on the socket);
	// unspecified (0.0.0.0) with the bound port when none left;
	// of a name's several addresses, none connecting, the attempt whose error
	// the failure carries (the first).
	// Prober and Node name the in-cluster prober that measured the
	// failure (run --probers); empty when this process probed.
	Prober     string `json:"prober,omitempty"`
	Node       string `json:"node,omitempty"`
	LocalAddr  string `json:"local_addr,omitempty"`
	RemoteAddr string `json:"remote_addr,omitempty"`
	// PodAddr is where the connection went as conntrack recorded it on
	// the probing host (report.Conntrack): after kube-proxy's rewrite of
	// the Service address on a node, the pod's; where nothing rewrote it
	// (off the nodes, an ingress), the address dialled. Absent when not
	// known.
	PodAddr string `json:"pod_addr,omitempty"`
	// NoConntrackEntry: conntrack on the probing host, read from before
	// the request with nothing lost, holds no entry for this refused fresh
	// connection, and none of an earlier one of its tuple that may live
	// on: its SYN was rejected by that host's own rules before any rewrite
	// to a pod (kube-proxy rejects a Service address it holds no endpoint
	// for). No pod was reached: LikelyPod and Evidence are empty.
	NoConntrackEntry bool `json:"no_conntrack_entry,omitempty"`
	// RefusedBy, for a refused connection whose socket's error queue was
	// read (Linux), says what refused it: RefusedByICMP or RefusedByRST.
	// Empty when not known.
	RefusedBy string `json:"refused_by,omitempty"`
	// ICMP is the ICMP error that ended a failed connect, as the kernel
	// queued it on its socket: who sent it and what it said. nil when none
	// came or the queue was not read.
	ICMP *ICMPError `json:"icmp,omitempty"`
	// JoinedConntrackEntry: the fresh connection's SYN left no conntrack
	// entry of its own; it joined the one an earlier unanswered connection
	// from the same local port to the same address left, still alive
	// (the kernel keeps an unanswered SYN's entry two minutes by default,
	// and kube-proxy does not clear it: kubernetes#101607), so it went
	// where that one went, whatever the rules said by then: PodAddr.
	JoinedConntrackEntry bool `json:"joined_conntrack_entry,omitempty"`
	// PriorPodAddr: the fresh connection's SYN made no conntrack entry of
	// its own (conntrack read throughout, nothing lost), and an earlier
	// connection from the same local port to the same address made one,
	// to this address, within the two minutes such an entry can live: the
	// SYN most likely followed it (kubernetes#101607). Not certain, as
	// whether that entry still lived depends on how its connection ended:
	// the pod is among the candidates, and PodAddr stays empty.
	PriorPodAddr string `json:"prior_pod_addr,omitempty"`
	// ViaEdge: the connection went to an address that is none of the
	// Service's (cluster IP, external IP, load balancer IP), no node's and
	// no pod's of the run: an ingress, proxy or load balancer that ends the
	// connection itself. A failure before the request could reach it
	// (refused, connect_timeout, tls) is that edge's: no pod took part,
	// so LikelyPod is empty.
	ViaEdge bool `json:"via_edge,omitempty"`
	// UpstreamAddr is where the edge in front of the pods (an ingress)
	// forwarded the request, from its access log (EdgeLog): a pod's
	// address and port. Absent when no log was read or it had no line
	// for the request.
	UpstreamAddr string `json:"upstream_addr,omitempty"`
	// EdgeNoBackend: the edge's access log has the request's line and it
	// names no backend the request went to: the edge answered it itself,
	// with no pod to send it to (Traefik: no server for the Service in its
	// view; nginx: none left to try, "no live upstreams"). No pod took
	// part, so LikelyPod is empty.
	EdgeNoBackend bool `json:"edge_no_backend,omitempty"`
	// EdgeDurationMS is how long the edge had the request, from receiving
	// it to logging it, by its access log (Traefik's Duration): longer
	// than the client's timeout when the edge went on waiting on a
	// backend after the client gave up. Absent when the log had no line
	// for the request.
	EdgeDurationMS float64 `json:"edge_duration_ms,omitempty"`
	// Evidence is what named LikelyPod: conntrack (the kernel's record of
	// where the connection went), access_log (the edge's record of where
	// it forwarded the request), backend_header (the response named its
	// pod) or timeline (inferred from the pods' lifecycle around it).
	Evidence string `json:"evidence,omitempty"`
	// Path names the path it was sent on when the run probed several.
	Path string `json:"path,omitempty"`
	// ServerClose, on eof and eof_reused, is CloseBeforeRequest or
	// CloseAfterRequest; absent when the kernel could not tell.
	ServerClose string `json:"server_close,omitempty"`
	// TLSCause, on tls, is why the handshake failed: handshake_timeout,
	// certificate, alert, not_tls or connection.
	TLSCause string `json:"tls_cause,omitempty"`
	// H2Code, on an HTTP/2 stream the server reset (refused_stream,
	// rst_stream) or ended with a GOAWAY (goaway_unprocessed, goaway_cut),
	// is the frame's error code: REFUSED_STREAM, NO_ERROR, ...
	H2Code string `json:"h2_code,omitempty"`
	// GoAway, on an HTTP/2 failure whose connection received a GOAWAY, is
	// how it came: single (one, naming the last stream: Go's
	// http.Server.Shutdown) or graceful (2^31-1 first, then the last
	// stream after a round trip: grpc-go's GracefulStop).
	GoAway string `json:"goaway,omitempty"`
	// StreamEnd, for a call of the grpc-go client sent and unanswered
	// (read_headers), is how it ended: conn_lost, reset or unprocessed
	// (StreamEnd* in vocab.go); absent when grpc-go gave no cause.
	StreamEnd string `json:"stream_end,omitempty"`
	// GRPCStatus, on grpc_status, is the call's status by name
	// (UNAVAILABLE, DEADLINE_EXCEEDED, ...); Error holds its message.
	GRPCStatus string `json:"grpc_status,omitempty"`
	// HiddenRetries, with grpc-go as the client, is how many times grpc-go
	// resent the failed call on its own before it failed.
	HiddenRetries int `json:"hidden_retries,omitempty"`
	// rollprobe run: the pod the failure most likely hit, how sure that
	// is (1: named by the backend header or conntrack, or the only pod
	// that can have caused it; else 1/len(Candidates), or one less than
	// that with PriorPodAddr, whose SYN may have reached no pod), the pods
	// that could have (when more than one, or with PriorPodAddr), and the
	// lifecycle around it.
	LikelyPod  string   `json:"likely_pod,omitempty"`
	Confidence float64  `json:"confidence,omitempty"`
	Candidates []string `json:"candidates,omitempty"`
	Context    string   `json:"context,omitempty"`
}

// FailureInfo says how complete Failures is.
type FailureInfo struct {
	Total uint64 `json:"total"` // failed attempts, local errors included
	Kept  int    `json:"kept"`
	Limit int    `json:"limit"`
}

// EdgeFailedAttemptsKnown says whether the run's pods carry the edge's
// failed attempts (PodTraffic.EdgeFailedAttempts): the faces show the
// column only then.
func EdgeFailedAttemptsKnown(r *Report) bool {
	for _, p := range r.Pods {
		if p.EdgeFailedAttempts != nil {
			return true
		}
	}
	return false
}

// ServedShown is a pod's served counts as every face shows them: the
// backend header's when one was asked for; else conntrack's
// (ServedConntrack), with the part after the deletion unknown (a
// kept-alive connection's responses are not dated one by one); else the
// edge's access log's (ServedAccessLog), the part after the deletion
// unknown too (dated by the edge's clock, not the run's); else unknown. Never a 0 that was not measured. source says which ("" when
// unknown).
func ServedShown(r *Report, p PodTraffic) (served, afterDeletion, source string) {
	switch {
	case r.Config.BackendHeader != "":
		return strconv.FormatUint(p.Served, 10), strconv.FormatUint(p.ServedAfterDeletion, 10), "backend header"
	case p.ServedConntrack != nil:
		return strconv.FormatUint(*p.ServedConntrack, 10), "unknown", "conntrack"
	case p.ServedAccessLog != nil:
		return strconv.FormatUint(*p.ServedAccessLog, 10), "unknown", "access log"
	}
	return "unknown", "unknown", ""
}
