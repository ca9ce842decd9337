package main

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// newGRPCServer is grpc-go's server with the standard health service
// (serving). Every call takes work, is counted as the HTTP requests are,
// and names its pod in the x-pod-name response header (the backend header
// rollprobe reads).
func newGRPCServer(name string, work time.Duration, served, afterTerm *atomic.Int64, terminating *atomic.Bool) *grpc.Server {
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if work > 0 {
			time.Sleep(work)
		}
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-pod-name", name))
		resp, err := h(ctx, req)
		served.Add(1)
		if terminating.Load() {
			afterTerm.Add(1)
		}
		return resp, err
	}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	return s
}
