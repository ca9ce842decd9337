package main

import (
	"context"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/rollprobe/rollprobe/internal/testbin"
)

// h2cGet GETs url over HTTP/2 with prior knowledge.
func h2cGet(url string) (*http.Response, error) {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return (&http.Client{Transport: &http.Transport{Protocols: &protocols}, Timeout: 2 * time.Second}).Get(url)
}

// The HTTP server speaks h2c on its port, as it does HTTP/1.1.
func TestServesH2C(t *testing.T) {
	testbin.Required(t)
	a := start(t)
	resp, err := h2cGet("http://" + a.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.Header.Get("X-Pod-Name") != "pod-x" {
		t.Fatalf("%s, X-Pod-Name %q", resp.Proto, resp.Header.Get("X-Pod-Name"))
	}
}

// With --grpc, one port serves grpc-go's health service on HTTP/2 and the
// HTTP server on HTTP/1.1; GracefulStop lets a call in flight finish and
// refuses new connections.
func TestGRPCAndHTTPOnOnePort(t *testing.T) {
	testbin.Required(t)
	a := start(t, "--grpc", "--work", "300ms")
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	var header metadata.MD
	resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING || len(header.Get("x-pod-name")) != 1 || header.Get("x-pod-name")[0] != "pod-x" {
		t.Fatalf("Check: %v, %v, x-pod-name %v", resp, err, header.Get("x-pod-name"))
	}
	ready, err := http.Get("http://" + a.addr + "/readyz")
	if err != nil || ready.StatusCode != 200 || ready.ProtoMajor != 1 {
		t.Fatalf("/readyz over HTTP/1.1: %v, %v", ready, err)
	}
	ready.Body.Close()

	// A call in flight when SIGTERM arrives (graceful: GracefulStop).
	done := make(chan error, 1)
	go func() {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at GracefulStop failed: %v", err)
	}
	if !a.exited(3 * time.Second) {
		t.Fatal("still running after GracefulStop")
	}
}
