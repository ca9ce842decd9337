package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/fleet/wire"
	"github.com/rollprobe/rollprobe/internal/faultserver"
	"github.com/rollprobe/rollprobe/prober"
)

// An agent driven as the CLI drives it — ping, config, start, stop —
// answers the ping, starts when told, and streams results that, merged,
// count exactly what the server saw.
func TestAgentStreamsWhatTheServerSaw(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	cfg := okConfig(t, srv, 200)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- RunAgent(context.Background(), AgentConfig{RunID: "run1.1", Name: "prober-0", Node: "node-a", Version: "test",
			MaxDuration: time.Minute, StartTimeout: time.Minute}, inR, outW)
		_ = outW.Close()
	}()
	lines := make(chan string, 10000)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(s string) {
		if _, err := io.WriteString(inW, s); err != nil {
			t.Fatal(err)
		}
	}
	send("ping 7\n")
	cmd, err := wire.ConfigCommand(wire.FromConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	send(cmd)
	startAt := time.Now().Add(200 * time.Millisecond)
	send(fmt.Sprintf("start %d\n", startAt.UnixNano()))
	time.Sleep(1200 * time.Millisecond)
	send("stop\n")
	if err := <-done; err != nil {
		t.Fatalf("agent: %v", err)
	}

	rec := prober.NewRecorder(100)
	m := NewMerger(rec, []string{"prober-0"})
	var kinds []wire.Kind
	for line := range lines {
		l, err := m.Feed(0, []byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != l.Kind {
			kinds = append(kinds, l.Kind)
		}
		switch l.Kind {
		case wire.KindPong:
			if l.Pong.ID != 7 {
				t.Errorf("pong %+v", l.Pong)
			}
		case wire.KindStarted:
			if d := time.Unix(0, l.Started.WallNS).Sub(startAt); d < 0 {
				t.Errorf("started %v before the time it was given", -d)
			}
			m.Started(0, startAt, startAt)
		}
	}
	got := fmt.Sprint(kinds)
	if !strings.HasPrefix(got, "[hello pong started") || !strings.HasSuffix(got, "end]") || !strings.Contains(got, "agg") {
		t.Errorf("line kinds in order: %s", got)
	}
	st := m.State()[0]
	if st.Hello == nil || st.Hello.Node != "node-a" || st.End == nil || st.End.Error != "" {
		t.Fatalf("state %+v", st)
	}
	m.Finish()
	tot := rec.Totals()
	if served := srv.Counts().Answered; tot.Classes[prober.OK] != uint64(served) || served < 150 {
		t.Fatalf("merged ok %d, the server answered %d (want about 200)", tot.Classes[prober.OK], served)
	}
}

// A config the agent cannot use ends it with the reason on its end line.
func TestAgentRefusesABadConfig(t *testing.T) {
	in := strings.NewReader(`config {"target":"http://127.0.0.1:1/","conn":"sideways","expect_status":"200"}` + "\nstart 1\n")
	var out strings.Builder
	err := RunAgent(context.Background(), AgentConfig{Name: "p", MaxDuration: time.Minute, StartTimeout: time.Minute}, in, &out)
	if err == nil || !strings.Contains(out.String(), `"k":"end"`) || !strings.Contains(out.String(), "sideways") {
		t.Fatalf("err %v, out %s", err, out.String())
	}
}

// A prober terminated mid-run (its context ended: SIGTERM) writes what it
// has and ends with an error, so the CLI counts it as lost, not as done.
func TestAgentTerminated(t *testing.T) {
	srv := faultserver.New(t, "pod-a")
	cfg := okConfig(t, srv, prober.DefaultRate)
	cmd, err := wire.ConfigCommand(wire.FromConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := strings.NewReader(cmd + fmt.Sprintf("start %d\n", time.Now().UnixNano()))
	var out strings.Builder
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	err = RunAgent(ctx, AgentConfig{Name: "p", MaxDuration: time.Minute, StartTimeout: time.Minute}, in, &out)
	if err == nil || !strings.Contains(out.String(), "terminated before the run ended") {
		t.Fatalf("err %v; the end line does not say so: %s", err, out.String()[max(0, len(out.String())-300):])
	}
}

// okConfig is a prober's configuration for srv's /ok at rate, with the
// backend header.
func okConfig(t *testing.T, srv *faultserver.Server, rate float64) prober.Config {
	t.Helper()
	cfg := prober.DefaultConfig()
	target, err := prober.ParseTarget(srv.URL("/ok"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Target, cfg.Rate, cfg.BackendHeader = target, rate, "X-Pod-Name"
	return cfg
}
