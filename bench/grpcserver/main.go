// Command grpcserver is the benchmarks' gRPC target: grpc-go's server with
// the standard health service (serving) and reflection (ghz reads the
// method from it), on one address, until killed.
package main

import (
	"flag"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18096", "address to serve on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	reflection.Register(s)
	log.Fatal(s.Serve(ln))
}
