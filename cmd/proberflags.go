package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollprobe/rollprobe/internal/field"
	"github.com/rollprobe/rollprobe/prober"
	"github.com/rollprobe/rollprobe/report"
)

// proberFlags are the load flags shared by probe and run. Fields hold the
// raw flag values; config() turns them into a validated prober.Config.
type proberFlags struct {
	rate           float64
	duration       time.Duration
	concurrency    int
	workers        int
	maxWorkers     int
	conn           string
	method         string
	headers        []string
	body           string
	bodyFile       string
	timeout        time.Duration
	connectTimeout time.Duration
	insecure       bool
	caCert         string
	connectTo      string
	expectStatus   string
	// fs is the flag set bind bound to: budget asks it whether
	// --expect-status was given (report.Budget.RedirectsExpected).
	fs             *pflag.FlagSet
	backendHeader  string
	requestID      string
	secretParams   []string
	keepFailures   int
	maxFailures    uint64
	maxFailureRate float64
	procs          int
	engine         string
	protocol       string
	connections    int
	streams        int
	grpcMethod     string
	grpcClient     string
	// timeoutFlag names the request-timeout flag: "request-timeout" (probe
	// keeps "timeout" as a deprecated spelling: in run and doctor it bounds
	// the whole command).
	timeoutFlag string
	// targetName names the target: "URL" (probe's argument) or "--target".
	targetName string
}

// flagNames maps prober.Config's fields to the flags that set them, for
// the field errors the prober returns.
func (f *proberFlags) flagNames() map[string]string {
	return map[string]string{
		"Target": f.targetName, "Rate": "--rate", "Duration": "--duration", "Concurrency": "--concurrency",
		"Workers": "--workers", "MaxWorkers": "--max-workers", "Conn": "--conn", "Timeout": "--" + f.timeoutFlag,
		"ConnectTimeout": "--connect-timeout", "CACert": "--cacert", "ConnectTo": "--connect-to", "ExpectStatus": "--expect-status", "KeepFailures": "--keep-failures",
		"Header": "-H", "Method": "-X", "Engine": "--engine", "Protocol": "--protocol", "Connections": "--connections", "Streams": "--streams", "GRPCMethod": "--grpc-method", "GRPCClient": "--grpc-client", "Body": "--body",
		"RequestIDHeader": "--request-id-header", "BackendHeader": "--backend-header",
	}
}

func defaultProberFlags() proberFlags {
	d := prober.DefaultConfig()
	return proberFlags{
		rate:           d.Rate,
		duration:       d.Duration,
		concurrency:    d.Concurrency,
		workers:        d.Workers,
		maxWorkers:     d.MaxWorkers,
		conn:           d.Conn.String(),
		method:         d.Method,
		timeout:        d.Timeout,
		connectTimeout: d.ConnectTimeout,
		expectStatus:   d.ExpectStatus.String(),
		requestID:      d.RequestIDHeader,
		keepFailures:   d.KeepFailures,
		engine:         "auto",
		protocol:       string(d.Protocol),
		connections:    d.Connections,
		grpcMethod:     d.GRPCMethod,
		grpcClient:     string(d.GRPCClient),
		timeoutFlag:    "request-timeout",
		targetName:     "URL",
	}
}

func (f *proberFlags) bind(fs *pflag.FlagSet) {
	f.fs = fs
	fs.Float64Var(&f.rate, "rate", f.rate, "requests per second at fixed intended send times (open model); 0 for the closed model with --concurrency")
	fs.DurationVar(&f.duration, "duration", f.duration, "how long to send; 0 sends until interrupted")
	fs.IntVar(&f.concurrency, "concurrency", f.concurrency, "closed model (--rate 0): requests in flight, each sent as the last one ends")
	fs.IntVar(&f.workers, "workers", f.workers, "open model: requests planned in flight at once (as many kept-alive connections), at least one per 3 ms of the rate; more when all are busy")
	fs.IntVar(&f.maxWorkers, "max-workers", f.maxWorkers, "open model: the most requests in flight at once (each on its own connection); beyond it requests wait and their lag shows")
	fs.StringVar(&f.conn, "conn", f.conn, "connections: new (one per request, exercises kube-proxy routing), keepalive (exercises draining) or mixed=F (fraction F new); h2 and grpc keep theirs unless given")
	fs.StringVarP(&f.method, "method", "X", f.method, "HTTP method")
	fs.StringArrayVarP(&f.headers, "header", "H", nil, `request header "Name: value" (repeatable)`)
	fs.StringVar(&f.body, "body", "", "request body")
	fs.StringVar(&f.bodyFile, "body-file", "", "read the request body from this file")
	fs.DurationVar(&f.timeout, f.timeoutFlag, f.timeout, "a request without a complete response within this time is a timeout")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", f.connectTimeout, "a connection attempt without answer within this time is a connect_timeout")
	fs.BoolVar(&f.insecure, "insecure", false, "skip the target's TLS certificate verification")
	fs.StringVar(&f.connectTo, "connect-to", "", "IP:PORT to connect to instead of the target's host and port, which still name the Host header and the TLS server name (one ingress replica or node, probed by the name users take)")
	fs.StringVar(&f.caCert, "cacert", "", "PEM file of the CA certificates an https target's certificate must chain to, instead of the system's (a private CA's)")
	fs.StringVar(&f.expectStatus, "expect-status", f.expectStatus, "statuses that count as ok, like 200-399 or 200,204")
	fs.StringVar(&f.backendHeader, "backend-header", "", "response header naming the serving backend (e.g. X-Pod-Name); responses are counted per value")
	fs.StringVar(&f.requestID, "request-id-header", f.requestID, `header carrying a unique ID ("<run>-<seq>") on every request`)
	fs.StringArrayVar(&f.secretParams, "secret-param", nil, "a query parameter of the URL whose value is a credential: sent, shown and stored as xxxxx (token, access_token, sig, key, ... and a user without password already are; repeatable)")
	fs.IntVar(&f.keepFailures, "keep-failures", f.keepFailures, "failures kept in full in the report; later ones are only counted")
	fs.Uint64Var(&f.maxFailures, "max-failures", 0, "failed requests allowed before the run fails (exit 1)")
	fs.Float64Var(&f.maxFailureRate, "max-failure-rate", 0, "also allow failures up to this fraction of requests (0 disables)")
	fs.StringVar(&f.engine, "engine", f.engine, "how requests are driven: loops (event loops over non-blocking sockets; Linux, an http:// target given by IP address: HTTP/1.1, and h2 or gRPC on long-lived connections), goroutines (Go's net package: https, names resolved for every connection), or auto (loops where they can, else goroutines); both record the same outcome for the same exchange")
	fs.StringVar(&f.protocol, "protocol", f.protocol, "http1; h2: HTTP/2 (ALPN h2 on https://, prior knowledge on http://), every request one stream, never retried, a GOAWAY or reset stream a failure of its own class; grpc: a unary gRPC call (--grpc-method) over h2, a status other than OK a failure (grpc_status)")
	fs.IntVar(&f.connections, "connections", f.connections, "h2 and grpc with --conn keepalive: the connections kept open; requests take them in turn, many streams at once on each (each connection stays with the pod it first reached)")
	fs.IntVar(&f.streams, "streams", 0, "h2 and grpc: the most streams in flight on one connection (h2load's -m); 0 leaves it to the server's limit; a request finding every connection full waits, in its latency")
	fs.StringVar(&f.grpcClient, "grpc-client", f.grpcClient, "--protocol grpc: who makes the calls: raw (rollprobe's own streams, every attempt counted), grpc-go (grpc-go itself, as a Go service's clients call: what it resends unseen is counted as hidden retries), or both (the target probed as two paths, raw and grpc-go, side by side; needs --rate)")
	fs.StringVar(&f.grpcMethod, "grpc-method", f.grpcMethod, "--protocol grpc: the method called, package.Service/Method; its request message is --body or --body-file (protobuf, empty by default: the health check asks for the whole server)")
	fs.IntVar(&f.procs, "procs", 0, "CPUs the prober uses (GOMAXPROCS); 0 sizes it to the rate (the GOMAXPROCS environment variable also wins)")
}

// applyProcs sets GOMAXPROCS for the run: --procs, else what the rate needs
// (prober.Procs), unless the GOMAXPROCS environment variable already chose.
// In the closed model, left to itself, the prober chooses while it runs
// (cfg.TuneProcs): as fast as possible depends on where the server is.
// It returns the value in effect at the start.
func (f *proberFlags) applyProcs(cfg *prober.Config) int {
	switch {
	case f.procs > 0:
		return setProcs(f.procs)
	case os.Getenv("GOMAXPROCS") != "":
		return runtime.GOMAXPROCS(0)
	case cfg.Rate <= 0 && runtime.NumCPU() > 1:
		cfg.TuneProcs = runtime.NumCPU()
		return setProcs(1)
	}
	return setProcs(prober.Procs(*cfg, runtime.NumCPU()))
}

func setProcs(n int) int {
	runtime.GOMAXPROCS(n)
	return n
}

// config builds the prober configuration for target.
func (f *proberFlags) config(target string) (prober.Config, error) { return f.configOf(target, false) }

// configOf builds the prober configuration for target; tlsOnly, for one
// of several paths, applies the TLS flags (--cacert) only when the target
// is https (the others have no certificate to verify).
func (f *proberFlags) configOf(target string, tlsOnly bool) (prober.Config, error) {
	cfg := prober.DefaultConfig()
	var errs []error
	u, err := prober.ParseTarget(target)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Target = u
	cfg.Rate, cfg.Duration = f.rate, f.duration
	cfg.Concurrency, cfg.Workers, cfg.MaxWorkers = f.concurrency, f.workers, f.maxWorkers
	if cfg.Conn, err = prober.ParseConnMode(f.conn); err != nil {
		errs = append(errs, err)
	}
	if cfg.Engine, err = prober.ParseEngine(f.engine); err != nil {
		errs = append(errs, err)
	}
	if cfg.Protocol, err = prober.ParseProtocol(f.protocol); err != nil {
		errs = append(errs, err)
	}
	if cfg.Protocol.Multiplexed() && (f.fs == nil || !f.fs.Changed("conn")) {
		// HTTP/2 and gRPC clients keep their connections and multiplex on
		// them: that, not run's mixed default for HTTP/1.1, is what users'
		// traffic does (--conn says otherwise when given).
		cfg.Conn = prober.ConnMode{FreshFraction: 0}
	}
	cfg.Connections, cfg.GRPCMethod, cfg.Streams = f.connections, f.grpcMethod, f.streams
	// Each model reads its own in-flight bound and ignores the other's: a
	// bound given to the model not in use would be ignored without a word
	// (a gate run believed held to 32 in flight sent at its rate all the
	// same).
	if f.fs != nil && f.fs.Changed("concurrency") && f.rate != 0 {
		errs = append(errs, fmt.Errorf("--concurrency %d applies only with --rate 0 (the closed model); at a fixed rate the requests in flight are --workers, up to --max-workers", f.concurrency))
	}
	for _, name := range []string{"workers", "max-workers"} {
		if f.fs != nil && f.fs.Changed(name) && f.rate == 0 {
			errs = append(errs, fmt.Errorf("--%s applies only at a fixed --rate (the open model); with --rate 0 the requests in flight are --concurrency", name))
		}
	}
	if f.fs != nil && f.fs.Changed("streams") && !cfg.Protocol.Multiplexed() {
		errs = append(errs, fmt.Errorf("--streams %d: only with --protocol h2 or grpc", f.streams))
	}
	if f.fs != nil && f.fs.Changed("connections") && !cfg.Protocol.Multiplexed() {
		errs = append(errs, fmt.Errorf("--connections %d: only with --protocol h2 or grpc (HTTP/1.1 keeps a connection per request in flight: --workers)", f.connections))
	}
	switch {
	case !slices.Contains([]string{string(prober.GRPCClientRaw), string(prober.GRPCClientGo), grpcClientBoth}, f.grpcClient):
		errs = append(errs, fmt.Errorf("--grpc-client %q: want raw, grpc-go or both", f.grpcClient))
	case f.fs != nil && f.fs.Changed("grpc-client") && cfg.Protocol != prober.GRPC:
		errs = append(errs, fmt.Errorf("--grpc-client %s: only with --protocol grpc", f.grpcClient))
	case f.grpcClient == grpcClientBoth:
		cfg.GRPCClient = prober.GRPCClientRaw // paths makes the grpc-go one
	default:
		cfg.GRPCClient = prober.GRPCClient(f.grpcClient)
	}
	if f.fs != nil && f.fs.Changed("grpc-method") && cfg.Protocol != prober.GRPC {
		errs = append(errs, fmt.Errorf("--grpc-method %s: only with --protocol grpc", f.grpcMethod))
	}
	if f.fs != nil && f.fs.Changed("method") && cfg.Protocol == prober.GRPC {
		errs = append(errs, fmt.Errorf("-X %s: a gRPC call is always a POST (choose the call with --grpc-method)", f.method))
	}
	cfg.Method = strings.ToUpper(f.method)
	cfg.Header = http.Header{}
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(value, "\r\n") {
			errs = append(errs, fmt.Errorf(`-H %q: want "Name: value"`, h))
			continue
		}
		cfg.Header.Add(name, strings.TrimSpace(value))
	}
	switch {
	case f.body != "" && f.bodyFile != "":
		errs = append(errs, errors.New("--body and --body-file: give one, not both"))
	case f.bodyFile != "":
		b, err := os.ReadFile(f.bodyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--body-file: %w", err))
		}
		cfg.Body = b
	case f.body != "":
		cfg.Body = []byte(f.body)
	}
	cfg.Timeout, cfg.ConnectTimeout, cfg.Insecure = f.timeout, f.connectTimeout, f.insecure
	cfg.ConnectTo = f.connectTo
	if f.caCert != "" && !(tlsOnly && u != nil && u.Scheme != "https") {
		if cfg.CACert, err = os.ReadFile(f.caCert); err != nil {
			errs = append(errs, fmt.Errorf("--cacert: %w", err))
		} else if len(cfg.CACert) == 0 {
			errs = append(errs, fmt.Errorf("--cacert %s: empty, no PEM certificate in it", f.caCert))
		}
	}
	if cfg.ExpectStatus, err = prober.ParseStatusSet(f.expectStatus); err != nil {
		errs = append(errs, err)
	}
	cfg.BackendHeader, cfg.RequestIDHeader, cfg.KeepFailures = f.backendHeader, f.requestID, f.keepFailures
	if f.requestID == "" {
		// Every engine writes the header on every request: an empty name
		// made a header line ": <id>" (HTTP/1.1) or a field HTTP/2 servers
		// answer with GOAWAY (PROTOCOL_ERROR).
		errs = append(errs, errors.New(`--request-id-header "": every request carries its ID in a header; name one the target accepts`))
	}
	cfg.SecretParams = f.secretParams
	if f.procs < 0 {
		errs = append(errs, fmt.Errorf("--procs %d: must not be negative", f.procs))
	}
	if !(f.maxFailureRate >= 0 && f.maxFailureRate <= 1) { // NaN fails both comparisons
		errs = append(errs, fmt.Errorf("--max-failure-rate %g: want a fraction from 0 to 1", f.maxFailureRate))
	}
	if len(errs) == 0 {
		if err := cfg.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return cfg, field.Rename(errors.Join(errs...), f.flagNames())
}

// maxPlausibleRate is far above what one machine can send (the engines
// reach a few hundred thousand requests a second on loopback).
const maxPlausibleRate = 10_000_000

// notes are what the flags ask for that is allowed but not what it seems,
// printed on stderr before the run.
func (f *proberFlags) notes() []string {
	if f.rate > maxPlausibleRate {
		return []string{fmt.Sprintf("--rate %g is beyond what one machine can send: the prober sends as fast as it can, "+
			"and a run that cannot hold its rate is inconclusive (exit 4); for as fast as possible, use --rate 0 with --concurrency", f.rate)}
	}
	return nil
}

func (f *proberFlags) budget() report.Budget {
	return report.Budget{MaxFailures: f.maxFailures, MaxFailureRate: f.maxFailureRate, RedirectsExpected: f.fs != nil && f.fs.Changed("expect-status")}
}

// namedTarget is one --target (or probe argument): URL, or NAME=URL.
type namedTarget struct{ name, url string }

// targetNamePattern is what a path's name may be: it labels the path in
// the report, JUnit case names and metric labels.
var targetNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// parseTargets reads the targets given: NAME=URL, or a bare URL named
// after its host. A URL's own "=" (in a query) is not a name: the part
// before the first "=" must be a name and the rest a URL with a scheme.
func parseTargets(values []string) ([]namedTarget, error) {
	var out []namedTarget
	var errs []error
	for _, v := range values {
		t := namedTarget{url: v}
		if name, rest, ok := strings.Cut(v, "="); ok && targetNamePattern.MatchString(name) && strings.Contains(rest, "://") {
			t = namedTarget{name: name, url: rest}
		} else if u, err := url.Parse(v); err == nil && u.Host != "" {
			t.name = u.Host
		} else {
			t.name = v
		}
		if i := slices.IndexFunc(out, func(o namedTarget) bool { return o.name == t.name }); i >= 0 {
			errs = append(errs, fmt.Errorf("two targets are named %s (%s and %s): name them, NAME=URL", t.name, out[i].url, t.url))
			continue
		}
		out = append(out, t)
	}
	if len(out) > prober.MaxPaths {
		errs = append(errs, fmt.Errorf("%d targets: at most %d in one run", len(out), prober.MaxPaths))
	}
	return out, errors.Join(errs...)
}

// paths builds one prober configuration per target: the first is the
// run's, and with several, each is a path probed side by side (at the
// same rate, with the same flags). Errors name the path.
func (f *proberFlags) paths(targets []namedTarget) (prober.Config, []prober.Path, error) {
	if f.grpcClient == grpcClientBoth {
		return f.bothClients(targets)
	}
	if len(targets) == 1 {
		cfg, err := f.config(targets[0].url)
		return cfg, nil, err
	}
	var errs []error
	if f.rate <= 0 {
		errs = append(errs, errors.New("several targets are probed side by side at one rate: give --rate (the closed model probes one target)"))
	}
	if f.connectTo != "" {
		errs = append(errs, errors.New("--connect-to sends every connection to one address: with several targets it would probe one path under several names"))
	}
	if f.caCert != "" && !slices.ContainsFunc(targets, func(t namedTarget) bool { return strings.HasPrefix(strings.ToLower(t.url), "https://") }) {
		errs = append(errs, errors.New("--cacert: no target is https://: only an https target has a certificate to verify"))
	}
	var paths []prober.Path
	for _, t := range targets {
		cfg, err := f.configOf(t.url, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
			continue
		}
		paths = append(paths, prober.Path{Name: t.name, Config: cfg})
	}
	if err := errors.Join(errs...); err != nil {
		return prober.Config{}, nil, err
	}
	return paths[0].Config, paths, nil
}

// grpcClientBoth is --grpc-client both: one target, two paths (the
// report's config says it by the same name).
const grpcClientBoth = report.GRPCClientBoth

// bothClients is --grpc-client both: the one target probed as two paths
// side by side, raw (every attempt counted) and grpc-go (what grpc-go's
// callers see, its hidden retries counted).
func (f *proberFlags) bothClients(targets []namedTarget) (prober.Config, []prober.Path, error) {
	var errs []error
	if len(targets) != 1 {
		errs = append(errs, errors.New("--grpc-client both puts the two clients side by side on one target: give one"))
	}
	if f.rate <= 0 {
		errs = append(errs, errors.New("--grpc-client both probes two paths side by side at one rate: give --rate (the closed model probes one)"))
	}
	if err := errors.Join(errs...); err != nil {
		return prober.Config{}, nil, err
	}
	raw, err := f.config(targets[0].url)
	if err != nil {
		return prober.Config{}, nil, err
	}
	goClient := raw
	goClient.GRPCClient = prober.GRPCClientGo
	if err := goClient.Validate(); err != nil {
		return prober.Config{}, nil, field.Rename(err, f.flagNames())
	}
	return raw, []prober.Path{{Name: string(prober.GRPCClientRaw), Config: raw}, {Name: string(prober.GRPCClientGo), Config: goClient}}, nil
}

// targetsLine names what a run probes, for its views: the target, or the
// paths by name.
func targetsLine(first prober.Config, paths []prober.Path) string {
	if len(paths) < 2 {
		return first.RedactedTarget()
	}
	var names []string
	for _, p := range paths {
		names = append(names, p.Name)
	}
	return fmt.Sprintf("%d paths: %s", len(paths), strings.Join(names, ", "))
}
