package cmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/internal/testbin"
	"github.com/rollprobe/rollprobe/internal/testenv"
	"github.com/rollprobe/rollprobe/report"
	"github.com/rollprobe/rollprobe/report/exitcode"
)

var binary string

// TestMain builds the real rollprobe binary once; every test runs it as a
// user or a CI job would and checks its exit code and outputs.
func TestMain(m *testing.M) { testbin.Main(m, "rollprobe", "..", &binary) }

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	testbin.Required(t)
	return runCmd(t, exec.Command(binary, args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	testbin.Required(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return result{code, stdout.String(), stderr.String()}
}

func TestExitCodes(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	// 10 requests over 1 s: the last is due 100 ms before the end, so a
	// loaded machine (CI runs the lab's tests beside these) still sends
	// every one and the counts below stay exact.
	short := []string{"--rate", "10", "--duration", "1s", "--progress", "0"}
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	ts.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		out  string // substring of stdout+stderr
	}{
		{"pass", append([]string{"probe", srv.URL("/ok")}, short...), 0, "verdict: PASS (exit 0)"},
		{"failures", append([]string{"probe", srv.URL("/reset"), "--conn", "new"}, short...), 1, "reset 10"},
		{"failures within budget", append([]string{"probe", srv.URL("/status/503"), "--max-failures", "1000"}, short...), 0, "http_5xx 10"},
		// An edge answering 308 to https: ok by the default statuses, yet
		// no pod was reached. Unless the user named the status.
		{"redirects prove nothing", append([]string{"probe", srv.URL("/status/308")}, short...), 4, "10 of 10 ok responses were redirects"},
		{"redirects asked for", append([]string{"probe", srv.URL("/status/308"), "--expect-status", "308"}, short...), 0, "verdict: PASS (exit 0)"},
		{"cacert for http", []string{"probe", srv.URL("/ok"), "--cacert", ca}, 2, "--cacert given: the target is http://"},
		{"cacert empty", []string{"probe", "https://127.0.0.1:1/", "--cacert", "/dev/null"}, 2, "--cacert /dev/null: empty"},
		{"cacert and insecure", []string{"probe", "https://127.0.0.1:1/", "--cacert", ca, "--insecure"}, 2, "choose one"},
		{"cacert missing", []string{"probe", "https://127.0.0.1:1/", "--cacert", "/nonexistent/ca.pem"}, 2, "--cacert: open /nonexistent/ca.pem"},
		{"connect-to not an address", []string{"probe", srv.URL("/ok"), "--connect-to", "edge.example:443"}, 2, "--connect-to \"edge.example:443\": want IP:PORT"},
		{"no url", []string{"probe"}, 2, "probe needs a URL to probe"},
		{"bad conn mode", []string{"probe", srv.URL("/ok"), "--conn", "sometimes"}, 2, "want new, keepalive or mixed=F"},
		{"bad protocol", []string{"probe", srv.URL("/ok"), "--protocol", "h3"}, 2, "--protocol \"h3\": want http1, h2 or grpc"},
		{"connections on HTTP/1.1", []string{"probe", srv.URL("/ok"), "--connections", "3"}, 2, "--connections 3: only with --protocol h2 or grpc"},
		{"a gRPC method without grpc", []string{"probe", srv.URL("/ok"), "--protocol", "h2", "--grpc-method", "a.B/C"}, 2, "--grpc-method a.B/C: only with --protocol grpc"},
		{"a gRPC call is a POST", []string{"probe", "http://127.0.0.1:1", "--protocol", "grpc", "-X", "GET"}, 2, "a gRPC call is always a POST"},
		{"a gRPC target with a path", []string{"probe", srv.URL("/ok"), "--protocol", "grpc"}, 2, "the method is named apart from the URL"},
		{"a bad gRPC method", []string{"probe", "http://127.0.0.1:1", "--protocol", "grpc", "--grpc-method", "Check"}, 2, "want package.Service/Method"},
		{"h2 on the loops, new connections", []string{"probe", srv.URL("/ok"), "--protocol", "h2", "--engine", "loops", "--conn", "new"}, 2, "new HTTP/2 connections per request run on the goroutine engine"},
		{"h2 on the loops over TLS", []string{"probe", "https://127.0.0.1:1/", "--protocol", "h2", "--engine", "loops"}, 2, "the event-loop engine cannot serve this target"},
		{"streams on HTTP/1.1", []string{"probe", srv.URL("/ok"), "--streams", "4"}, 2, "--streams 4: only with --protocol h2 or grpc"},
		{"negative streams", []string{"probe", srv.URL("/ok"), "--protocol", "h2", "--streams", "-1"}, 2, "--streams -1: must not be negative"},
		{"a bad gRPC client", []string{"probe", "http://127.0.0.1:1", "--protocol", "grpc", "--grpc-client", "java"}, 2, "--grpc-client \"java\": want raw, grpc-go or both"},
		{"a gRPC client without grpc", []string{"probe", srv.URL("/ok"), "--grpc-client", "grpc-go"}, 2, "--grpc-client grpc-go: only with --protocol grpc"},
		{"both clients on two targets", []string{"probe", "a=http://127.0.0.1:1", "b=http://127.0.0.1:2", "--protocol", "grpc", "--grpc-client", "both"}, 2, "on one target: give one"},
		{"both clients in the closed model", []string{"probe", "http://127.0.0.1:1", "--protocol", "grpc", "--grpc-client", "both", "--rate", "0"}, 2, "give --rate"},
		{"grpc-go on new connections", []string{"probe", "http://127.0.0.1:1", "--protocol", "grpc", "--grpc-client", "grpc-go", "--conn", "new"}, 2, "grpc-go keeps its connections"},
		{"bad url", []string{"probe", "ftp://x/"}, 2, "want an http:// or https:// URL"},
		{"bad header", []string{"probe", srv.URL("/ok"), "-H", "novalue"}, 2, `want "Name: value"`},
		{"bad flag", []string{"probe", srv.URL("/ok"), "--frobnicate"}, 2, "unknown flag"},
		{"run without target", []string{"run", "--deployment", "web"}, 2, "--target URL is required"},
		{"run with two triggers", []string{"run", "--deployment", "web", "--target", "http://x/", "--watch", "--image", "a=b"}, 2, "choose one trigger"},
		{"run with a scale and a drain", []string{"run", "--deployment", "web", "--target", "http://x/", "--scale", "2", "--drain", "n1"}, 2, "--drain or --scale"},
		{"run --scale 0", []string{"run", "--deployment", "web", "--target", "http://x/", "--scale", "0"}, 2, "--scale 0: want 1 or more"},
		{"run --scale of a DaemonSet", []string{"run", "--daemonset", "agent", "--target", "http://x/", "--scale", "2"}, 2, "--scale applies to a Deployment, StatefulSet or Argo Rollout"},
		{"run --drain of a DaemonSet", []string{"run", "--daemonset", "agent", "--target", "http://x/", "--drain", "node-1"}, 2, "--drain applies to a Deployment, StatefulSet or Argo Rollout: a drain leaves a DaemonSet's pods on the node"},
		{"run command without --exec", []string{"run", "--deployment", "web", "--target", "http://x/", "--", "helm", "upgrade"}, 2, "goes after --exec --"},
		{"run --exec without command", []string{"run", "--deployment", "web", "--target", "http://x/", "--exec"}, 2, "give the deploy command after --"},
		{"bad ui", []string{"probe", srv.URL("/ok"), "--ui", "fancy"}, 2, "want auto, tui, plain or none"},
		{"rate NaN", []string{"probe", srv.URL("/ok"), "--rate", "NaN"}, 2, "--rate NaN: must be a finite number"},
		{"rate Inf", []string{"probe", srv.URL("/ok"), "--rate", "Inf"}, 2, "--rate +Inf: must be a finite number"},
		{"failure rate NaN", []string{"probe", srv.URL("/ok"), "--max-failure-rate", "NaN"}, 2, "--max-failure-rate NaN"},
		{"mixed NaN", []string{"probe", srv.URL("/ok"), "--conn", "mixed=NaN"}, 2, "must be a number from 0 to 1"},
		{"port out of range", []string{"probe", "http://127.0.0.1:99999/"}, 2, "port 99999 is not a TCP port"},
		{"no scheme", []string{"probe", "127.0.0.1:8080/healthz"}, 2, "want an absolute URL with its scheme, like http://127.0.0.1:8080/healthz"},
		{"method with a line break", []string{"probe", srv.URL("/ok"), "-X", "GET /x HTTP/1.1\r\nX: y"}, 2, "-X"},
		{"header value with a line break", []string{"probe", srv.URL("/ok"), "-H", "X-A: b\r\nX-B: c"}, 2, "-H"},
		// Header names the prober puts on the wire or reads: tokens only.
		{"request ID header with a line break", []string{"probe", srv.URL("/ok"), "--request-id-header", "X-Id\r\nX-Injected: 1"}, 2, "--request-id-header"},
		{"request ID header with a space", []string{"probe", srv.URL("/ok"), "--request-id-header", "Bad Header"}, 2, "not a header name"},
		{"empty request ID header", []string{"probe", srv.URL("/ok"), "--request-id-header", ""}, 2, `--request-id-header "": every request carries its ID`},
		{"backend header with a colon", []string{"probe", srv.URL("/ok"), "--backend-header", "a:b"}, 2, "--backend-header"},
		{"two namespaces", []string{"run", "--deployment", "prod/web", "-n", "other", "--target", "http://x/"}, 2, "name two namespaces"},
		{"doctor with two namespaces", []string{"doctor", "--deployment", "prod/web", "--namespace", "other"}, 2, "name two namespaces"},
		{"wait without watch", []string{"run", "--deployment", "web", "--target", "http://x/", "--wait", "1m"}, 2, "--wait applies only with --watch"},
		{"edge log wait without the log", []string{"run", "--deployment", "web", "--target", "http://x/", "--edge-log-wait", "2m"}, 2, "--edge-log-wait applies only with --edge-access-log"},
		{"edge log format without the log", []string{"run", "--deployment", "web", "--target", "http://x/", "--edge-log-format", "nginx"}, 2, "--edge-log-format applies only with --edge-access-log"},
		{"unknown edge log format", []string{"run", "--deployment", "web", "--target", "http://x/", "--edge-access-log", "/dev/null", "--edge-log-format", "apache"}, 2, `--edge-log-format "apache": want one of auto, traefik, nginx`},
		{"negative edge log wait", []string{"run", "--deployment", "web", "--target", "http://x/", "--edge-access-log", "/dev/null", "--edge-log-wait", "-1s"}, 2, "--edge-log-wait -1s: must not be negative"},
		{"rate beyond any machine", []string{"probe", srv.URL("/ok"), "--rate", "1e12", "--duration", "100ms", "--progress", "0", "--workers", "2", "--max-workers", "8"}, 4,
			"--rate 1e+12 is beyond what one machine can send"},
		{"concurrency at a fixed rate", []string{"probe", srv.URL("/ok"), "--concurrency", "32"}, 2, "--concurrency 32 applies only with --rate 0"},
		{"workers in the closed model", []string{"run", "--deployment", "web", "--target", "http://x/", "--rate", "0", "--max-workers", "8"}, 2, "--max-workers applies only at a fixed --rate"},
		{"a prober image without probers", []string{"run", "--deployment", "web", "--target", "http://x/", "--prober-image", "r/p:1", "--validate"}, 2, "--prober-image: only with --probers N"},
		{"doctor without deployment", []string{"doctor"}, 2, "one of --deployment, --statefulset, --daemonset, --rollout is required"},
		{"run without workload", []string{"run", "--target", "http://x/"}, 2, "one of --deployment, --statefulset, --daemonset, --rollout is required"},
		{"run with two workloads", []string{"run", "--deployment", "web", "--statefulset", "db", "--target", "http://x/"}, 2, "--deployment and --statefulset: give one workload"},
		{"a statefulset of two namespaces", []string{"run", "--statefulset", "prod/db", "-n", "other", "--target", "http://x/"}, 2, "--statefulset prod/db and --namespace other name two namespaces"},
		{"a daemonset's bad name", []string{"doctor", "--daemonset", "a/b/c"}, 2, "--daemonset"},
		{"two targets of one name", []string{"probe", srv.URL("/ok"), srv.URL("/status/503")}, 2, "two targets are named 127.0.0.1:"},
		{"paths in the closed model", []string{"probe", "a=" + srv.URL("/ok"), "b=" + srv.URL("/ok"), "--rate", "0"}, 2, "give --rate"},
		{"paths with one connect-to", []string{"probe", "a=" + srv.URL("/ok"), "b=" + srv.URL("/ok"), "--connect-to", srv.Addr()}, 2, "--connect-to sends every connection to one address"},
		{"a CA for no https path", []string{"probe", "a=" + srv.URL("/ok"), "b=" + srv.URL("/ok"), "--cacert", "/etc/hostname"}, 2, "--cacert: no target is https://"},
		{"a path's bad URL", []string{"probe", "a=" + srv.URL("/ok"), "b=ftp://x/"}, 2, "b: "},
		{"paths from the cluster", []string{"run", "--deployment", "web", "--target", "a=http://x/", "--target", "b=http://y/", "--probers", "2", "--validate"}, 0, "the command line is valid"},
		{"paths from the cluster in a probe", []string{"probe", "a=http://x/", "b=http://y/", "--probers", "2", "--validate"}, 0, "the command line is valid"},
		{"lab of too many nodes", []string{"lab", "up", "--nodes", "5", "--state-dir", "/nonexistent"}, 2, "--nodes 5: want 1 to 4"},
		{"lab lag of a node it lacks", []string{"lab", "up", "--nodes", "2", "--proxy-lag", "lab-node-3=1s", "--state-dir", "/nonexistent"}, 2, "nodes lab-node-1 to lab-node-2"},
		{"lab bad lag", []string{"lab", "up", "--proxy-lag", "soon", "--state-dir", "/nonexistent"}, 2, "want a non-negative duration"},
		{"lab exec on two hosts", []string{"lab", "exec", "--node", "lab-node-1", "--client", "--state-dir", "/nonexistent", "--", "true"}, 2, "choose one host"},
		{"lab exec when down", []string{"lab", "exec", "--state-dir", "/nonexistent", "--", "true"}, 2, "the lab is not up"},
		{"doctor bad threshold", []string{"doctor", "--deployment", "web", "--fail-on", "sometimes"}, 2, "want error, warning, info or never"},
		{"cannot hold the rate", []string{"probe", srv.URL("/stall?ms=100"), "--rate", "100", "--duration", "1s",
			"--workers", "1", "--max-workers", "1", "--progress", "0"}, 4, "INCONCLUSIVE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.args...)
			// A run the machine stalled (a CI run: 5 of 10 requests sent
			// in 1 s, each on time, the process then held 1.2 s) is
			// rightly inconclusive, and proves nothing of the exit code
			// asked for: it is run once more. Never for a failure.
			if tt.code != int(exitcode.Inconclusive) && r.code == int(exitcode.Inconclusive) && strings.Contains(r.stdout, "req/s, below") {
				t.Logf("the machine held the prober back (%s): once more", lastLine(r.stdout))
				r = run(t, tt.args...)
			}
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tt.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout+r.stderr, tt.out) {
				t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", tt.out, r.stdout, r.stderr)
			}
		})
	}
}

// lastLine is s's last non-empty line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestUsageErrorWritesNothing: a bad invocation changes nothing, not even
// the report file.
func TestUsageErrorWritesNothing(t *testing.T) {
	testbin.Required(t)
	path := filepath.Join(t.TempDir(), "report.json")
	r := run(t, "probe", "http://127.0.0.1:1/", "--rate", "-5", "--report", path)
	if r.code != 2 {
		t.Fatalf("exit %d, want 2", r.code)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("report written on a usage error: %v", err)
	}
}

// A misspelt subcommand of a command group is a usage error (exit 2), with
// the one meant suggested: cobra printed the group's help and exited 0, so
// a CI step's `rollprobe report shwo report.json` passed having done
// nothing. A group alone still prints its help and exits 0.
func TestUnknownSubcommandIsAUsageError(t *testing.T) {
	testbin.Required(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "shwo", "report.json"}, `unknown command "shwo" for "rollprobe report" (did you mean show?)`},
		{[]string{"lab", "upp"}, `unknown command "upp" for "rollprobe lab" (did you mean up?)`},
		{[]string{"report", "diff", "a.json", "b.json"}, `unknown command "diff" for "rollprobe report"`},
		{[]string{"rport", "show"}, `unknown command "rport" for "rollprobe"`},
	} {
		if r := run(t, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 saying %s", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	// Missing or extra arguments say what the command takes, with its
	// usage line (cobra's own: "requires at least 1 arg(s)").
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"probe"}, "rollprobe: probe needs a URL to probe (usage: rollprobe probe URL|NAME=URL... [flags])"},
		{[]string{"report", "show"}, "rollprobe: report show needs one report file (the JSON --report wrote) (usage: rollprobe report show FILE [flags])"},
		{[]string{"report", "show", "a.json", "b.json"}, "rollprobe: report show takes one report file (the JSON --report wrote); extra: b.json"},
		{[]string{"install"}, "rollprobe: install needs one directory"},
		{[]string{"lab", "exec"}, "rollprobe: lab exec needs a command to run after --"},
		{[]string{"doctor", "web"}, "rollprobe: doctor takes no arguments; extra: web (usage: rollprobe doctor --deployment|--statefulset|--daemonset|--rollout [NS/]NAME [flags])"},
		{[]string{"fleet-agent", "x"}, "rollprobe: fleet-agent takes no arguments; extra: x"},
		// A flag's unreadable value, in words rather than Go's.
		{[]string{"probe", "http://127.0.0.1:9/", "--rate", "abc"}, `rollprobe: --rate "abc": want a number` + "\n"},
		{[]string{"probe", "http://127.0.0.1:9/", "--max-failures", "-1"}, `rollprobe: --max-failures "-1": want a whole number, 0 or more` + "\n"},
		{[]string{"run", "--deployment", "web", "--target", "http://127.0.0.1:9/", "--timeout", "5"}, `rollprobe: --timeout "5": want a duration with its unit, like 500ms, 30s or 2m` + "\n"},
		{[]string{"report", "show", "r.json", "-o"}, "rollprobe: flag needs an argument: 'o' in -o"},
	} {
		if r := run(t, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 saying %s", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	if r := run(t, "report"); r.code != 0 || !strings.Contains(r.stdout, "Usage:\n  rollprobe report [command]\n\n") {
		t.Errorf("report alone: exit %d, stdout %q, stderr %q; want its help naming its subcommands alone, exit 0", r.code, r.stdout, r.stderr)
	}
	if r := run(t, "report", "show", "--help"); r.code != 0 || !strings.Contains(r.stdout, "Usage:\n  rollprobe report show FILE [flags]\n") {
		t.Errorf("report show --help: exit %d, stdout %q; want its own usage line", r.code, r.stdout)
	}
}

// Asking for the dashboard without a terminal is a usage error found
// before anything runs, not a run cut short when the dashboard fails.
func TestDashboardWithoutATerminalIsAUsageError(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	path := filepath.Join(t.TempDir(), "report.json")
	r := run(t, "probe", srv.URL("/ok"), "--ui", "tui", "--duration", "1s", "--report", path)
	if r.code != 2 || !strings.Contains(r.stderr, "--ui tui: standard output is not a terminal") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("report written on a usage error: %v", err)
	}
	if n := srv.Counts().Requests; n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// TestLocalErrorsAreInconclusive: with 16 file descriptors the prober runs
// out of its own (EMFILE). That is its fault, not the target's: exit 4 and
// no failure counted against the target.
func TestLocalErrorsAreInconclusive(t *testing.T) {
	testbin.Required(t)
	if _, err := exec.LookPath("prlimit"); err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "prlimit (util-linux) not installed")
	}
	srv := faultserver.New(t, "pod-a")
	path := filepath.Join(t.TempDir(), "report.json")
	r := runCmd(t, exec.Command("prlimit", "--nofile=16:16", "--", binary, "probe", srv.URL("/stall?ms=300"),
		"--conn", "new", "--rate", "200", "--duration", "500ms", "--progress", "0", "--report", path))
	if r.code != 4 {
		t.Fatalf("exit %d, want 4\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep, err := report.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Prober.LocalErrors == 0 || rep.Totals.ByClass["local"] != rep.Prober.LocalErrors {
		t.Fatalf("local errors %d, by_class %v", rep.Prober.LocalErrors, rep.Totals.ByClass)
	}
	if rep.Totals.Failed != 0 {
		t.Fatalf("%d failures blamed on the target for the prober's own EMFILE", rep.Totals.Failed)
	}
}

// TestInterruptWritesReport: SIGINT mid-run stops probing, writes the report
// marked interrupted and exits 130.
// SIGINT (Ctrl-C), SIGTERM (a CI runner's cancel) and SIGHUP (a closed
// terminal) all stop the run cleanly: report written, exit 130.
func TestInterruptWritesReport(t *testing.T) {
	testbin.Required(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) { interrupted(t, sig) })
	}
}

func interrupted(t *testing.T, sig syscall.Signal) {
	srv := faultserver.New(t, "pod-a")
	path := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(binary, "probe", srv.URL("/stall?ms=50"), "--rate", "100", "--duration", "60s",
		"--progress", "0", "--report", path)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reapOnFailure(t, cmd)
	for srv.Counts().Requests < 50 {
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("wait: %v, want exit 130\n%s", err, stdout.String())
	}
	rep, err := report.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || !rep.Verdict.Interrupted || rep.Verdict.ExitCode != 130 || rep.Totals.Sent+rep.Prober.Canceled < 50 {
		t.Fatalf("report interrupted=%v verdict %+v sent %d canceled %d", rep.Interrupted, rep.Verdict, rep.Totals.Sent, rep.Prober.Canceled)
	}
	if rep.Totals.Failed != 0 {
		t.Fatalf("requests cut by Ctrl-C counted as failures: %v", rep.Totals.ByClass)
	}
	if !strings.Contains(stdout.String(), "INTERRUPTED") {
		t.Fatalf("summary lacks the interruption:\n%s", stdout.String())
	}
	if n := rep.Prober.Canceled; n > 0 && !strings.Contains(stdout.String(), fmt.Sprintf("canceled %d (in flight when interrupted", n)) {
		t.Fatalf("the summary hides the %d requests cut by the interruption:\n%s", n, stdout.String())
	}
}

func TestJSONOutput(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	r := run(t, "probe", srv.URL("/close-reused"), "-o", "json", "--rate", "100", "--duration", "500ms",
		"--backend-header", "X-Pod-Name", "--progress", "0")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (eof_reused)\n%s", r.code, r.stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, r.stdout)
	}
	c := srv.Counts()
	if rep.Totals.Sent != uint64(c.Requests) || rep.Totals.ByClass["eof_reused"] != uint64(c.Closed) {
		t.Fatalf("report sent %d eof_reused %d; server saw %d requests, closed %d",
			rep.Totals.Sent, rep.Totals.ByClass["eof_reused"], c.Requests, c.Closed)
	}
	if rep.Totals.ByBackend["pod-a"] != rep.Totals.OK {
		t.Fatalf("by_backend %v, ok %d", rep.Totals.ByBackend, rep.Totals.OK)
	}
}

func TestProgressLines(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	r := run(t, "probe", srv.URL("/ok"), "--rate", "50", "--duration", "1200ms", "--progress", "500ms")
	// 4: the machine was too busy to hold the rate (the verdict says so);
	// this test is about the progress lines, not the verdict.
	if r.code != 0 && r.code != 4 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Count(r.stderr, "req/s")
	if lines < 1 || !strings.Contains(r.stderr, "completed ") {
		t.Fatalf("want plain progress lines on stderr, got:\n%s", r.stderr)
	}
	// Not a terminal: auto is plain, never the dashboard's escape codes.
	if strings.Contains(r.stdout+r.stderr, "\x1b[") {
		t.Fatalf("escape codes on a pipe:\n%q", r.stdout)
	}
	quiet := run(t, "probe", srv.URL("/ok"), "--rate", "50", "--duration", "1200ms", "--progress", "500ms", "--ui", "none")
	if (quiet.code != 0 && quiet.code != 4) || strings.Contains(quiet.stderr, "req/s") { // 4 as above
		t.Fatalf("--ui none printed progress:\n%s", quiet.stderr)
	}
	if !strings.Contains(quiet.stderr, "rollprobe: note: --progress has no effect with --ui none") {
		t.Errorf("--ui none with --progress: no note that it has no effect:\n%s", quiet.stderr)
	}
}

func TestVersion(t *testing.T) {
	testbin.Required(t)
	for _, args := range [][]string{{"--version"}, {"version"}} { // kubectl users type the command
		r := run(t, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "rollprobe version") {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stdout)
		}
	}
}

// TestCIOutputs: --junit writes a test case per check, and under GitHub
// Actions the step summary is appended and failures are annotated.
func TestCIOutputs(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	dir := t.TempDir()
	summary := filepath.Join(dir, "summary.md")
	if err := os.WriteFile(summary, []byte("earlier step\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outputs := filepath.Join(dir, "output")
	cmd := exec.Command(binary, "probe", srv.URL("/reset"), "--conn", "new", "--rate", "100", "--duration", "300ms",
		"--progress", "0", "--junit", filepath.Join(dir, "junit.xml"), "--report", filepath.Join(dir, "r.json"))
	cmd.Env = append(os.Environ(), "GITHUB_ACTIONS=true", "GITHUB_STEP_SUMMARY="+summary, "GITHUB_OUTPUT="+outputs)
	r := runCmd(t, cmd)
	if r.code != 1 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	junit, err := os.ReadFile(filepath.Join(dir, "junit.xml"))
	if err != nil || !strings.Contains(string(junit), `<testcase name="no dropped requests"`) || !strings.Contains(string(junit), "<failure") {
		t.Fatalf("junit: %v\n%s", err, junit)
	}
	md, _ := os.ReadFile(summary)
	if !strings.HasPrefix(string(md), "earlier step\n") || !strings.Contains(string(md), "## ❌ rollprobe probe") {
		t.Fatalf("step summary must be appended:\n%s", md)
	}
	if !strings.Contains(r.stdout, "::error title=rollprobe: no dropped requests::") {
		t.Fatalf("no annotation on stdout:\n%s", r.stdout)
	}
	// The step outputs: name=value lines, agreeing with the report.
	out, _ := os.ReadFile(outputs)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	rep, err := report.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got["verdict"] != "fail" || got["exit-code"] != "1" || got["failed"] != fmt.Sprint(rep.Totals.Failed) || rep.Totals.Failed == 0 ||
		got["sent"] != fmt.Sprint(rep.Totals.Sent) || got["report"] != filepath.Join(dir, "r.json") || got["junit"] != filepath.Join(dir, "junit.xml") {
		t.Fatalf("step outputs %v (report: %d of %d failed)\n%s", got, rep.Totals.Failed, rep.Totals.Sent, out)
	}
}

// TestReportShow renders a saved report again; the text is the same summary
// the probe printed, and a file of another schema is a usage error.
func TestReportShow(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	path := filepath.Join(t.TempDir(), "report.json")
	first := run(t, "probe", srv.URL("/status/503"), "--rate", "50", "--duration", "300ms", "--progress", "0", "--report", path)
	if first.code != 1 {
		t.Fatalf("probe exit %d", first.code)
	}
	shown := run(t, "report", "show", path)
	if shown.code != 0 || !strings.HasPrefix(first.stdout, shown.stdout) {
		t.Fatalf("report show exit %d:\n%s\nprobe printed:\n%s", shown.code, shown.stdout, first.stdout)
	}
	md := run(t, "report", "show", path, "-o", "markdown")
	if md.code != 0 || !strings.Contains(md.stdout, "## ❌ rollprobe probe") {
		t.Fatalf("markdown: %d\n%s", md.code, md.stdout)
	}
	bad := filepath.Join(t.TempDir(), "other.json")
	os.WriteFile(bad, []byte(`{"schema":"other/v2"}`), 0o644)
	if r := run(t, "report", "show", bad); r.code != 2 || !strings.Contains(r.stderr, "schema") {
		t.Fatalf("other schema: exit %d %s", r.code, r.stderr)
	}
	// rollprobe.report/v1 without its totals: exit 2 saying what is
	// missing, never "sent 0" beside the stored verdict.
	var doc map[string]any
	b, _ := os.ReadFile(path)
	_ = json.Unmarshal(b, &doc)
	delete(doc, "totals")
	b, _ = json.Marshal(doc)
	os.WriteFile(bad, b, 0o644)
	if r := run(t, "report", "show", bad); r.code != 2 || !strings.Contains(r.stderr, "totals") || strings.Contains(r.stdout, "sent 0") {
		t.Fatalf("report without totals: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// A bad value is reported under the flag the user typed: run's request
// timeout is --request-timeout (its --timeout bounds the whole run).
func TestErrorsNameTheFlag(t *testing.T) {
	testbin.Required(t)
	r := run(t, "run", "--deployment", "web", "--target", "http://127.0.0.1:1/", "--request-timeout", "0", "--connect-timeout", "-1s")
	if r.code != 2 || !strings.Contains(r.stderr, "--request-timeout 0s: must be positive") ||
		!strings.Contains(r.stderr, "--connect-timeout -1s: must be positive") || strings.Contains(r.stderr, "--timeout 0s") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// probe's --timeout is the deprecated spelling of --request-timeout
	// (one meaning per name: --timeout bounds the whole run and doctor).
	r = run(t, "probe", "--timeout", "0", "http://127.0.0.1:1/")
	if r.code != 2 || !strings.Contains(r.stderr, "--timeout 0s: must be positive") || !strings.Contains(r.stderr, "use --request-timeout") || r.stdout != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	r = run(t, "probe", "--request-timeout", "0", "http://127.0.0.1:1/")
	if r.code != 2 || !strings.Contains(r.stderr, "--request-timeout 0s: must be positive") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// Kubernetes flags do nothing for a probe without --probers: refused,
	// not ignored (--insecure-skip-tls-verify looked like the target's).
	r = run(t, "probe", "--insecure-skip-tls-verify", "https://127.0.0.1:1/")
	if r.code != 2 || !strings.Contains(r.stderr, "--insecure-skip-tls-verify: for the Kubernetes API, used only with --probers") ||
		!strings.Contains(r.stderr, "--insecure") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	// Every timeout is a duration; doctor's kubectl-style --request-timeout
	// still works, deprecated.
	for _, args := range [][]string{{"doctor", "--deployment", "web", "--kube-request-timeout", "soon"},
		{"run", "--deployment", "web", "--target", "http://x/", "--kube-request-timeout", "5"}} {
		if r = run(t, args...); r.code != 2 || !strings.Contains(r.stderr, "--kube-request-timeout") || !strings.Contains(r.stderr, "want a duration with its unit") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	r = run(t, "doctor", "--deployment", "web", "--request-timeout", "1s", "--kubeconfig", writeKubeconfig(t, "http://127.0.0.1:1"))
	if r.code != 2 || !strings.Contains(r.stderr, "use --kube-request-timeout") || !strings.Contains(r.stderr, "connection refused") {
		t.Fatalf("doctor --request-timeout: exit %d, stderr %q", r.code, r.stderr)
	}
	r = run(t, "run", "--deployment", "a/b/c", "--target", "http://127.0.0.1:1/", "--kubeconfig", writeKubeconfig(t, "http://127.0.0.1:1"))
	if r.code != 2 || !strings.Contains(r.stderr, `--deployment "a/b/c": want [NAMESPACE/]NAME`) {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A server that accepts connections and never answers: doctor and run end
// with exit 2 within their bound, naming the server, having changed nothing.
func TestUnansweringAPIServer(t *testing.T) {
	testbin.Required(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	for _, scheme := range []string{"http", "https"} {
		kubeconfig := writeKubeconfig(t, scheme+"://"+ln.Addr().String())
		for _, args := range [][]string{
			{"doctor", "--deployment", "web", "--timeout", "2s"},
			{"run", "--deployment", "web", "--target", "http://127.0.0.1:1/", "--timeout", "2s", "--ui", "none"},
		} {
			// The guard only keeps a hang from stalling the suite; the
			// bound under test is the command's own --timeout.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			r := runCmd(t, exec.CommandContext(ctx, binary, append(args, "--kubeconfig", kubeconfig)...))
			cancel()
			if r.code != 2 || !strings.Contains(r.stderr, ln.Addr().String()) {
				t.Errorf("%s %v: exit %d, stderr %q; want 2 naming the server", scheme, args[0], r.code, r.stderr)
			}
		}
	}
	// Each call's own bound: the error says which call, which bound, and
	// how to change it (it said only "context deadline exceeded").
	kubeconfig := writeKubeconfig(t, "http://"+ln.Addr().String())
	for _, args := range [][]string{
		{"doctor", "--deployment", "web"},
		{"run", "--deployment", "web", "--target", "http://127.0.0.1:1/", "--ui", "none"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r := runCmd(t, exec.CommandContext(ctx, binary, append(args, "--kubeconfig", kubeconfig, "--kube-request-timeout", "1s")...))
		cancel()
		for _, want := range []string{"get deployment default/web", "no answer from the Kubernetes API server within 1s", "--kube-request-timeout"} {
			if r.code != 2 || !strings.Contains(r.stderr, want) {
				t.Errorf("%s: exit %d, stderr %q; want 2 saying %q", args[0], r.code, r.stderr, want)
			}
		}
	}
}

// Every output path is checked before anything is sent: a missing
// directory or a directory at the path is exit 2 with no request made.
func TestOutputsCheckedBeforeTraffic(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "same.json"), filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--report", filepath.Join(dir, "missing", "r.json")},
		{"--report", dir},
		{"--junit", filepath.Join(dir, "missing", "j.xml")},
		{"--html", filepath.Join(dir, "missing", "r.html")},
		{"--html", dir},
		// Two outputs at one file (one would be lost), compared as files.
		{"--junit", filepath.Join(dir, "same.json"), "--report", filepath.Join(dir, "same.json")},
		{"--html", filepath.Join(dir, "link.json"), "--report", filepath.Join(dir, "same.json")},
		{"--junit", "-", "--report", "-"},
		{"--report", "-", "-o", "json"},
		// A name the file system refuses fails here, not after the run.
		{"--report", filepath.Join(dir, strings.Repeat("r", 251)+".json")},
	} {
		r := run(t, append([]string{"probe", srv.URL("/ok"), "--rate", "50", "--duration", "200ms", "--ui", "none"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", args, r.code, r.stderr, args[0])
		}
		if strings.Contains(r.stderr, ".rollprobe-") {
			t.Errorf("%v: the error names rollprobe's temporary file: %s", args, r.stderr)
		}
	}
	if n := srv.Counts().Requests; n != 0 {
		t.Fatalf("%d requests were sent before the outputs were checked", n)
	}
	r := run(t, "doctor", "--deployment", "web", "--junit", filepath.Join(dir, "missing", "j.xml"))
	if r.code != 2 || !strings.Contains(r.stderr, "--junit") {
		t.Errorf("doctor: exit %d, stderr %q", r.code, r.stderr)
	}
}

// --html writes the page of the run: the same page report show -o html
// makes from the JSON report written beside it.
func TestHTMLOutput(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
	r := run(t, "probe", srv.URL("/status/503"), "--rate", "20", "--duration", "500ms", "--ui", "none",
		"--report", jsonPath, "--html", htmlPath)
	if r.code != 1 || !strings.Contains(r.stdout, "html: "+htmlPath) {
		t.Fatalf("exit %d, stdout %q; want 1 and the page's path", r.code, r.stdout)
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	shown := run(t, "report", "show", jsonPath, "-o", "html")
	if shown.code != 0 || shown.stdout != string(page) {
		t.Fatalf("report show -o html: exit %d, %d bytes; --html wrote %d bytes (they differ)", shown.code, len(shown.stdout), len(page))
	}
	for _, want := range []string{`id="timeline"`, "http_5xx", `data-class="http_5xx"`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}

// A report that can no longer be written at the end (its directory went
// away during the run): the summary is still printed, JUnit still
// written, and the exit code says an output failed (5), unless the
// verdict's own code comes first (failures above budget: 1).
func TestOutputFailureAtTheEnd(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	for _, tc := range []struct {
		path string
		code int
	}{{"/ok", 5}, {"/status/503", 1}} {
		dir := t.TempDir()
		gone := filepath.Join(dir, "gone")
		if err := os.Mkdir(gone, 0o755); err != nil {
			t.Fatal(err)
		}
		junit := filepath.Join(dir, "junit.xml")
		cmd := exec.Command(binary, "probe", srv.URL(tc.path), "--rate", "20", "--duration", "1500ms", "--ui", "none",
			"--report", filepath.Join(gone, "r.json"), "--junit", junit)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		before := srv.Counts().Requests
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		reapOnFailure(t, cmd)
		for srv.Counts().Requests == before {
			time.Sleep(10 * time.Millisecond)
		}
		if err := os.Remove(gone); err != nil { // the run has begun: the check passed
			t.Fatal(err)
		}
		err := cmd.Wait()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		// The summary line states the process's real exit code and why.
		if code != tc.code || !strings.Contains(stdout.String(), fmt.Sprintf("(exit %d)", tc.code)) ||
			!strings.Contains(stdout.String(), "could not write the JSON report") || !strings.Contains(stderr.String(), "r.json") {
			t.Fatalf("%s: exit %d (want %d)\nstdout: %s\nstderr: %s", tc.path, code, tc.code, stdout.String(), stderr.String())
		}
		if strings.Contains(stdout.String(), "report: ") {
			t.Errorf("%s: the summary names a report that was not written:\n%s", tc.path, stdout.String())
		}
		xml, err := os.ReadFile(junit)
		if err != nil {
			t.Fatalf("%s: JUnit not written after the report failed: %v", tc.path, err)
		}
		if !strings.Contains(string(xml), `name="every output was written"`) {
			t.Errorf("%s: the JUnit does not say an output failed:\n%s", tc.path, xml)
		}
	}
}

// An output path that is not a regular file is written in place, never
// replaced: a character device stays a device, a FIFO's reader gets the
// report, and "-" puts the report on stdout with the summary on stderr.
// (As root, --report /dev/null used to replace the machine's /dev/null.)
func TestOutputsToSpecialFiles(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	dir := t.TempDir()
	probe := []string{"probe", srv.URL("/ok"), "--rate", "20", "--duration", "300ms", "--ui", "none"}

	null := filepath.Join(dir, "null") // a null device of our own: never risk the machine's
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_LAB", "mknod needs root: %v", err)
	}
	for _, flag := range []string{"--report", "--junit", "--html"} {
		r := run(t, append(probe, flag, null)...)
		if fi, err := os.Lstat(null); r.code != 0 || err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("%s %s: exit %d, now %v (%v): the device was replaced\n%s", flag, null, r.code, fi.Mode(), err, r.stderr)
		}
	}

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() { b, _ := os.ReadFile(fifo); got <- b }()
	if r := run(t, append(probe, "--report", fifo)...); r.code != 0 {
		t.Fatalf("--report FIFO: exit %d\n%s", r.code, r.stderr)
	}
	var rep report.Report
	select {
	case b := <-got:
		if err := json.Unmarshal(b, &rep); err != nil || rep.Totals.Sent == 0 {
			t.Fatalf("the FIFO's reader got no report: %v", err)
		}
	case <-time.After(30 * time.Second): // the reader is still blocked in open: nothing was written
		t.Fatal("nothing was written to the FIFO")
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v", err)
	}

	r := run(t, append(probe, "--report", "-")...)
	rep = report.Report{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || rep.Totals.Sent == 0 {
		t.Fatalf("--report -: exit %d, stdout is not the report alone (%v):\n%.300s", r.code, err, r.stdout)
	}
	if !strings.Contains(r.stderr, "verdict: PASS (exit 0)") {
		t.Errorf("--report -: the summary is not on stderr:\n%s", r.stderr)
	}
}

// Credentials in the URL are sent as Basic auth (as curl does) and shown
// nowhere: not in the summary, the report, JUnit or the -v log. An -H
// Authorization value is sent and stored nowhere either.
func TestCredentialsAreSentAndRedacted(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	dir := t.TempDir()
	reportPath, junit := filepath.Join(dir, "r.json"), filepath.Join(dir, "j.xml")
	target := "http://alice:S3cret@" + srv.Addr() + "/ok"
	r := run(t, "probe", target, "--rate", "10", "--duration", "1s", "--ui", "none", "-v", "--report", reportPath, "--junit", junit)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := srv.Authorizations()["Basic YWxpY2U6UzNjcmV0"]; n != 10 { // base64("alice:S3cret")
		t.Fatalf("requests with the credentials as Basic auth: %d of 10 (%v)", n, srv.Authorizations())
	}
	rep, _ := os.ReadFile(reportPath)
	xml, _ := os.ReadFile(junit)
	for name, text := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "report": string(rep), "junit": string(xml)} {
		if strings.Contains(text, "S3cret") {
			t.Errorf("%s shows the password:\n%s", name, text)
		}
	}
	if !strings.Contains(r.stdout, "alice:xxxxx@") || !strings.Contains(string(rep), "alice:xxxxx@") {
		t.Errorf("the redacted target is missing:\n%s", r.stdout)
	}
	// A bad URL with credentials: the error redacts them too.
	if r := run(t, "probe", "ftp://bob:Hunter2@host/"); r.code != 2 || strings.Contains(r.stderr, "Hunter2") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	// A token as the URL's user, and credentials in the query (the usual
	// names and one named with --secret-param): sent, shown nowhere.
	html := filepath.Join(dir, "r.html")
	target = "http://T0KENUSER@" + srv.Addr() + "/ok?token=Zt0k&X-Amz-Signature=Zsig&custom=Zcustom&keep=visible"
	r = run(t, "probe", target, "--rate", "10", "--duration", "500ms", "--ui", "none", "-v", "--secret-param", "custom",
		"--report", reportPath, "--junit", junit, "--html", html)
	if r.code != 0 || srv.Targets()["/ok?token=Zt0k&X-Amz-Signature=Zsig&custom=Zcustom&keep=visible"] == 0 ||
		srv.Authorizations()["Basic VDBLRU5VU0VSOg=="] == 0 { // base64("T0KENUSER:")
		t.Fatalf("exit %d; the credentials were not sent: %v %v", r.code, srv.Targets(), srv.Authorizations())
	}
	rep, _ = os.ReadFile(reportPath)
	xml, _ = os.ReadFile(junit)
	page, _ := os.ReadFile(html)
	for name, text := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "report": string(rep), "junit": string(xml), "html": string(page)} {
		for _, secret := range []string{"T0KENUSER", "Zt0k", "Zsig", "Zcustom"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %s", name, secret)
			}
		}
	}
	if !strings.Contains(r.stdout, "http://xxxxx@"+srv.Addr()+"/ok?token=xxxxx&X-Amz-Signature=xxxxx&custom=xxxxx&keep=visible") {
		t.Errorf("the target is not shown redacted as expected:\n%s", r.stdout)
	}
	// -H Authorization: sent, stored nowhere.
	r = run(t, "probe", srv.URL("/ok"), "--rate", "10", "--duration", "500ms", "--ui", "none", "-v",
		"-H", "Authorization: Bearer t0ken-value", "--report", reportPath)
	rep, _ = os.ReadFile(reportPath)
	if srv.Authorizations()["Bearer t0ken-value"] == 0 || strings.Contains(r.stdout+r.stderr+string(rep), "t0ken-value") {
		t.Errorf("the header was not sent, or is shown: %v\n%s", srv.Authorizations(), r.stdout+r.stderr)
	}
}

// The achieved rate and the duration are measured over the intended
// window: 2 requests due at 0 and 0.5 s in a 1 s run are 2 req/s over 1 s.
func TestRateOverTheIntendedWindow(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	r := run(t, "probe", srv.URL("/ok"), "--rate", "2", "--duration", "1s", "--ui", "none")
	if r.code != 0 || !strings.Contains(r.stdout, ", 1.0s)") || !strings.Contains(r.stdout, "2.0 of 2 req/s") {
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
}

// Without any kubeconfig the message says what rollprobe reads.
func TestNoKubeconfig(t *testing.T) {
	testbin.Required(t)
	cmd := exec.Command(binary, "doctor", "--deployment", "web")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=")
	r := runCmd(t, cmd)
	if r.code != 2 || !strings.Contains(r.stderr, "pass --kubeconfig (or --server and --token), set KUBECONFIG") || strings.Contains(r.stderr, "KUBERNETES_MASTER") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// kubectl's connection flags, as client-go binds them, on every command
// that talks to a cluster; the bound on each API call is
// --kube-request-timeout everywhere, a duration (--request-timeout is the
// prober's). probe's help says each is for --probers.
func TestKubectlConnectionFlags(t *testing.T) {
	testbin.Required(t)
	common := []string{"--kubeconfig", "--context", "--namespace", "--cluster", "--user", "--server", "--token", "--as", "--as-group",
		"--as-uid", "--certificate-authority", "--client-certificate", "--client-key", "--insecure-skip-tls-verify", "--tls-server-name",
		"--kube-request-timeout"}
	for _, cmd := range []string{"run", "probe", "doctor"} {
		r := run(t, cmd, "--help")
		for _, flag := range common {
			if !strings.Contains(r.stdout, flag+" ") {
				t.Errorf("%s --help lacks %s", cmd, flag)
			}
		}
		if !strings.Contains(r.stdout, "--kube-request-timeout duration") {
			t.Errorf("%s: --kube-request-timeout is not a duration", cmd)
		}
		if cmd != "probe" {
			continue
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			for _, flag := range common {
				if strings.Contains(line, flag+" ") && !strings.Contains(line, "with --probers: ") {
					t.Errorf("probe --help: %s is not marked as for --probers: %s", flag, line)
				}
			}
		}
	}
	if r := run(t, "run", "--help"); !strings.Contains(r.stdout, "--request-timeout duration") {
		t.Errorf("run's --request-timeout is no longer the prober's:\n%s", r.stdout)
	}
}

// Run as kubectl-rollprobe (a kubectl plugin), help and usage say
// "kubectl rollprobe".
func TestKubectlPluginName(t *testing.T) {
	testbin.Required(t)
	plugin := filepath.Join(t.TempDir(), "kubectl-rollprobe")
	if err := os.Symlink(binary, plugin); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, exec.Command(plugin, "run", "--help"))
	if r.code != 0 || !strings.Contains(r.stdout, "kubectl rollprobe run --deployment") {
		t.Fatalf("exit %d; usage does not say kubectl rollprobe:\n%s", r.code, r.stdout)
	}
	if r := run(t, "run", "--help"); strings.Contains(r.stdout, "kubectl rollprobe") {
		t.Fatal("run as rollprobe, the usage says kubectl rollprobe")
	}
}

// reapOnFailure kills (by PID) and reaps a started command the test did not
// wait for, when the test ends early.
func reapOnFailure(t *testing.T, cmd *exec.Cmd) {
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

// install copies the binary into a directory (an init container's way out
// of the release image); a missing directory is a usage error.
func TestInstall(t *testing.T) {
	testbin.Required(t)
	dir := t.TempDir()
	r := run(t, "install", dir)
	if r.code != 0 || strings.TrimSpace(r.stdout) != filepath.Join(dir, "rollprobe") {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	out, err := exec.Command(filepath.Join(dir, "rollprobe"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rollprobe version") {
		t.Fatalf("the copy does not run: %v %s", err, out)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if r := run(t, "install", filepath.Join(dir, "missing")); r.code != 2 || !strings.Contains(r.stderr, "not a directory") {
		t.Fatalf("missing dir: exit %d %s", r.code, r.stderr)
	}
}

// A panic inside the run is rollprobe's own failure: exit 70 with the
// report written and marked (Go's runtime would exit 2, "nothing was
// sent or changed", and write nothing).
func TestInternalErrorExits70(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	path := filepath.Join(t.TempDir(), "r.json")
	junit := filepath.Join(t.TempDir(), "j.xml")
	cmd := exec.Command(binary, "probe", srv.URL("/ok"), "--rate", "100", "--duration", "20s", "--ui", "none", "--report", path, "--junit", junit)
	cmd.Env = append(os.Environ(), "ROLLPROBE_TEST_PANIC=prober")
	r := runCmd(t, cmd)
	if r.code != 70 || !strings.Contains(r.stdout, "verdict: ERROR (exit 70)") || !strings.Contains(r.stdout, "internal error: panic in a prober") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	rep, err := report.ReadFile(path)
	if err != nil || rep.Verdict.ExitCode != 70 || rep.Verdict.InternalError == "" || rep.Totals.Sent < 2 {
		t.Fatalf("report: %v %+v", err, rep.Verdict)
	}
	if xml, _ := os.ReadFile(junit); !strings.Contains(string(xml), "<error") {
		t.Errorf("the JUnit has no <error>:\n%s", xml)
	}
}

// Several paths in one probe: each is counted apart (the server's own
// counts per path agree), the run's totals are their sum, any path that
// drops fails the run, and every output names the paths.
func TestSeveralPaths(t *testing.T) {
	testbin.Required(t)
	srv := faultserver.New(t, "pod-a")
	dir := t.TempDir()
	r := run(t, "probe", "healthy="+srv.URL("/ok"), "failing="+srv.URL("/status/503"), "--rate", "100", "--duration", "1s",
		"--progress", "0", "--report", filepath.Join(dir, "r.json"), "--junit", filepath.Join(dir, "junit.xml"))
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (one path dropped)\n%s%s", r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := report.Validate(data); err != nil {
		t.Fatalf("the report does not match its schema: %v", err)
	}
	rep, err := report.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Paths) != 2 || rep.Paths[0].Name != "healthy" || rep.Paths[1].Name != "failing" {
		t.Fatalf("paths %+v", rep.Paths)
	}
	targets := srv.Targets()
	var sent uint64
	for _, p := range rep.Paths {
		path := strings.TrimPrefix(p.Target, "http://"+srv.Addr())
		if p.Totals.Sent == 0 || p.Totals.Sent != uint64(targets[path]) {
			t.Errorf("path %s: sent %d, the server answered %d on %s", p.Name, p.Totals.Sent, targets[path], path)
		}
		sent += p.Totals.Sent
	}
	if rep.Totals.Sent != sent || rep.Totals.Failed != rep.Paths[1].Totals.Failed || rep.Totals.ByClass["http_5xx"] != rep.Paths[1].Totals.Sent {
		t.Errorf("the run's totals %+v are not its paths' sum", rep.Totals)
	}
	if !rep.Paths[0].Verdict.Pass || rep.Paths[1].Verdict.Pass || rep.Verdict.Pass || !strings.HasPrefix(rep.Verdict.Reasons[0], "failing: ") {
		t.Errorf("verdicts: healthy %+v, failing %+v, run %+v", rep.Paths[0].Verdict, rep.Paths[1].Verdict, rep.Verdict)
	}
	for _, f := range rep.Failures {
		if f.Path != "failing" {
			t.Fatalf("a failure on path %q: %+v", f.Path, f)
		}
	}
	if len(rep.Failures) == 0 || len(targets) != 2 {
		t.Fatalf("%d failures kept; the server saw %v", len(rep.Failures), targets)
	}
	junit, _ := os.ReadFile(filepath.Join(dir, "junit.xml"))
	for _, want := range []string{`<testcase name="no dropped requests: healthy"`, `<testcase name="no dropped requests: failing"`, `name="rollprobe.path.failing"`} {
		if !strings.Contains(string(junit), want) {
			t.Errorf("junit lacks %s:\n%s", want, junit)
		}
	}
	for _, want := range []string{"rollprobe probe 2 paths", "paths     healthy", "failing  " + srv.URL("/status/503"), "FAIL"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the summary lacks %q:\n%s", want, r.stdout)
		}
	}
}

// --cacert with several paths verifies the https ones and leaves the
// plain ones alone.
func TestSeveralPathsWithOneCA(t *testing.T) {
	testbin.Required(t)
	plain := faultserver.New(t, "pod-a")
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(tlsSrv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, "probe", "plain="+plain.URL("/ok"), "tls="+tlsSrv.URL+"/", "--cacert", ca, "--rate", "50", "--duration", "500ms", "--progress", "0", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Paths) != 2 || rep.Paths[0].TLSRoots != "" || rep.Paths[1].TLSRoots != "cacert" || rep.Paths[1].Totals.OK == 0 {
		t.Fatalf("paths %+v", rep.Paths)
	}
}
