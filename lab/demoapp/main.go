// Command demoapp is the lab's sample workload: an HTTP server that names
// its pod in every response and shuts down in one of the ways real apps do,
// so that rollouts drop (or don't drop) requests exactly as in production.
// It speaks HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port;
// with --grpc ($GRPC=true) its HTTP/2 connections go to grpc-go's own
// server instead, serving the standard health service (naming its pod in
// the x-pod-name response header), while HTTP/1.1 (readiness, /stats)
// stays with the HTTP server.
//
// Shutdown modes (--shutdown, or $SHUTDOWN), on SIGTERM:
//
//	immediate  exit at once: the listener vanishes, connections are cut
//	close      http.Server.Close (grpc-go: Stop): kept-alive and in-flight connections cut
//	graceful   http.Server.Shutdown: stop accepting, finish in-flight, close idle (one
//	           GOAWAY on h2); grpc-go: GracefulStop (two GOAWAYs, then in-flight calls finish)
//	drain=D    keep serving for D (answering with Connection: close), then as graceful
//	ignore     ignore SIGTERM; only SIGKILL ends it
//
// With --grpc-via-http ($GRPC_VIA_HTTP=true) the gRPC calls are served by
// grpc-go's ServeHTTP inside the HTTP server instead: its shutdown is
// net/http's (http.Server.Shutdown, one GOAWAY). --link-delay
// ($LINK_DELAY) delays everything the app writes, emulating a long link.
//
// graceful waits --shutdown-timeout ($SHUTDOWN_TIMEOUT, 30s) for requests in
// flight, then exits with what is left (grpc-go: Stop): a timeout shorter
// than --work cuts the streams the GOAWAY let through.
//
// GET /readyz fails with 503 after SIGTERM when --unready-on-term is set, and
// before --ready-delay has passed since start. GET /stats returns counters.
//
// `demoapp pause` only waits for SIGTERM or SIGINT and exits 0: the lab's
// pod sandbox ("pause") image runs it. `demoapp get URL` prints what a GET
// of URL answers (exit 1 on an error or a status other than 200): a client
// inside pods, where busybox's wget (static glibc) crashes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

type options struct {
	listen        string
	name          string
	shutdown      string
	drain         time.Duration
	startupDelay  time.Duration
	readyDelay    time.Duration
	unreadyOnTerm bool
	work          time.Duration
	maxInFlight   int // 0: no limit
	heartbeat     time.Duration
	grpc          bool
	grpcViaHTTP   bool
	linkDelay     time.Duration
	shutdownAfter time.Duration
	upstream      string
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "pause" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "get" {
		if err := get(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	o := options{}
	flag.StringVar(&o.listen, "listen", envOr("LISTEN", ":8080"), "address to listen on ($LISTEN)")
	flag.StringVar(&o.name, "name", envOr("POD_NAME", hostname()), "name sent in X-Pod-Name ($POD_NAME)")
	flag.StringVar(&o.shutdown, "shutdown", envOr("SHUTDOWN", "graceful"), "on SIGTERM: immediate, close, graceful, drain=D or ignore ($SHUTDOWN)")
	flag.DurationVar(&o.startupDelay, "startup-delay", envDuration("STARTUP_DELAY"), "wait this long before listening ($STARTUP_DELAY)")
	flag.DurationVar(&o.readyDelay, "ready-delay", envDuration("READY_DELAY"), "/readyz fails until this long after listening ($READY_DELAY)")
	flag.BoolVar(&o.unreadyOnTerm, "unready-on-term", os.Getenv("UNREADY_ON_TERM") == "true", "/readyz fails once SIGTERM arrived ($UNREADY_ON_TERM=true)")
	flag.DurationVar(&o.work, "work", envDuration("WORK"), "time each request takes to serve ($WORK)")
	flag.IntVar(&o.maxInFlight, "max-in-flight", envInt("MAX_IN_FLIGHT"), "past this many requests in flight, answer 503 at once, as an overloaded server sheds load; 0 for no limit ($MAX_IN_FLIGHT)")
	flag.DurationVar(&o.heartbeat, "heartbeat", envDuration("HEARTBEAT"), "log a line this often, 0 for never ($HEARTBEAT)")
	flag.BoolVar(&o.grpc, "grpc", os.Getenv("GRPC") == "true", "HTTP/2 connections go to grpc-go's server (the health service) ($GRPC=true)")
	flag.BoolVar(&o.grpcViaHTTP, "grpc-via-http", os.Getenv("GRPC_VIA_HTTP") == "true", "serve the gRPC calls through the HTTP server (grpc-go's ServeHTTP): net/http's shutdown, one GOAWAY ($GRPC_VIA_HTTP=true)")
	flag.DurationVar(&o.linkDelay, "link-delay", envDuration("LINK_DELAY"), "deliver everything written this much later, as over a long link ($LINK_DELAY)")
	flag.DurationVar(&o.shutdownAfter, "shutdown-timeout", envDurationOr("SHUTDOWN_TIMEOUT", 30*time.Second), "graceful: how long requests in flight may take before the process exits ($SHUTDOWN_TIMEOUT)")
	flag.StringVar(&o.upstream, "upstream", os.Getenv("UPSTREAM"), "forward / to this base URL (http://127.0.0.1:9090), as a proxy in front of an app in the same pod; the upstream's X-Pod-Name passes through ($UPSTREAM)")
	flag.Parse()
	mode, drain, err := parseShutdown(o.shutdown)
	if err != nil {
		log.Fatal(err)
	}
	o.shutdown, o.drain = mode, drain
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

func parseShutdown(s string) (mode string, drain time.Duration, err error) {
	switch {
	case s == "immediate" || s == "close" || s == "graceful" || s == "ignore":
		return s, 0, nil
	case strings.HasPrefix(s, "drain="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "drain="))
		if err != nil || d < 0 {
			return "", 0, fmt.Errorf("--shutdown %q: want drain=DURATION, like drain=5s", s)
		}
		return "drain", d, nil
	}
	return "", 0, fmt.Errorf("--shutdown %q: want immediate, close, graceful, drain=D or ignore", s)
}

func run(o options) error {
	// Signals first: a SIGTERM during the startup delay must not kill us
	// before the chosen shutdown mode applies.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix(o.name + " ")
	if o.heartbeat > 0 {
		// A line every period until the process dies: the last one in the
		// container log dates a SIGKILL to within the period.
		go func() {
			for range time.Tick(o.heartbeat) {
				log.Printf("alive")
			}
		}()
	}
	if o.startupDelay > 0 {
		log.Printf("starting in %s", o.startupDelay)
		time.Sleep(o.startupDelay)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	if o.linkDelay > 0 {
		ln = delayListener{Listener: ln, delay: o.linkDelay}
	}
	started := time.Now()
	var served, afterTerm, shed, inFlight atomic.Int64
	var terminating, closeConns atomic.Bool
	var unreadyUntil atomic.Int64 // UnixNano; /unready sets it

	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pod-Name", o.name)
		if time.Since(started) < o.readyDelay || (o.unreadyOnTerm && terminating.Load()) || time.Now().UnixNano() < unreadyUntil.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// /unready?for=D fails /readyz for D while the pod goes on serving:
	// a readiness probe that failed for a moment (a slow answer under
	// load), which the lab's tests make on purpose. for=0s ends it.
	mux.HandleFunc("/unready", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("for"))
		if err != nil || d < 0 || d > time.Minute {
			http.Error(w, "want /unready?for=DURATION, up to 1m (0s: ready again)", http.StatusBadRequest)
			return
		}
		unreadyUntil.Store(time.Now().Add(d).UnixNano())
		log.Printf("/readyz fails for %s", d)
		fmt.Fprintf(w, "unready for %s\n", d)
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "name=%s served=%d served_after_sigterm=%d terminating=%v shed=%d\n", o.name, served.Load(), afterTerm.Load(), terminating.Load(), shed.Load())
	})
	var upstream *httputil.ReverseProxy
	if o.upstream != "" {
		u, err := url.Parse(o.upstream)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return fmt.Errorf("--upstream %q: want http://HOST:PORT", o.upstream)
		}
		upstream = httputil.NewSingleHostReverseProxy(u)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if n := inFlight.Add(1); o.maxInFlight > 0 && n > int64(o.maxInFlight) {
			inFlight.Add(-1)
			shed.Add(1)
			w.Header().Set("X-Pod-Name", o.name)
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		defer inFlight.Add(-1)
		if o.work > 0 {
			time.Sleep(o.work)
		}
		served.Add(1)
		if terminating.Load() {
			afterTerm.Add(1)
		}
		if upstream != nil {
			upstream.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Pod-Name", o.name)
		if closeConns.Load() {
			// Draining: tell kept-alive clients to go elsewhere.
			w.Header().Set("Connection", "close")
		}
		fmt.Fprintf(w, "hello from %s\n", o.name)
	})
	var handler http.Handler = mux
	if o.grpcViaHTTP {
		viaHTTP := newGRPCServer(o.name, o.work, &served, &afterTerm, &terminating)
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				viaHTTP.ServeHTTP(w, r)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv.Protocols = &protocols
	errc := make(chan error, 2)
	var gs *grpc.Server
	var split *splitListener
	if o.grpc {
		split = newSplitListener(ln)
		gs = newGRPCServer(o.name, o.work, &served, &afterTerm, &terminating)
		go func() { errc <- srv.Serve(split.http1) }()
		go func() { _ = gs.Serve(split.h2) }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	log.Printf("listening on %s (shutdown %s, grpc %v, grpc via http %v, link delay %s)", ln.Addr(), o.shutdown, o.grpc, o.grpcViaHTTP, o.linkDelay)

	for {
		select {
		case err := <-errc:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		case sig := <-sigs:
			if sig == syscall.SIGTERM && o.shutdown == "ignore" {
				log.Printf("%s: ignored", sig)
				continue
			}
			terminating.Store(true)
			log.Printf("%s: shutting down (%s), served %d", sig, o.shutdown, served.Load())
			switch o.shutdown {
			case "immediate":
				os.Exit(0)
			case "close":
				if split != nil {
					split.close()
					gs.Stop()
				}
				_ = srv.Close()
			case "drain":
				closeConns.Store(true)
				time.Sleep(o.drain)
				fallthrough
			case "graceful", "ignore":
				ctx, cancel := context.WithTimeout(context.Background(), o.shutdownAfter)
				if split != nil {
					split.close() // new connects are refused, as when Shutdown closes a listener
					go func() { <-ctx.Done(); gs.Stop() }()
					gs.GracefulStop()
				}
				if err := srv.Shutdown(ctx); err != nil {
					log.Printf("shutdown: %v: exiting with requests in flight", err)
				}
				cancel()
			}
			log.Printf("stopped, served %d (%d after SIGTERM)", served.Load(), afterTerm.Load())
			return nil
		}
	}
}

func get(url string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envDurationOr(key string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(key)); err == nil {
		return d
	}
	return def
}

func envInt(key string) int {
	n, _ := strconv.Atoi(os.Getenv(key))
	return n
}

func envDuration(key string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(key))
	return d
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
