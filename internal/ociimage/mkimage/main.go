// Command mkimage writes rollprobe's release image (ociimage.Release) as
// an OCI image layout tar, without a Docker engine:
//
//	go run ./internal/ociimage/mkimage -binary dist/rollprobe_linux_amd64/rollprobe \
//	    -arch amd64 -name docker.io/rollprobe/rollprobe:v1.2.3 -out dist/rollprobe-image-amd64.tar
//
// A registry takes it with any OCI tool, e.g.
// skopeo copy oci-archive:dist/rollprobe-image-amd64.tar docker://docker.io/rollprobe/rollprobe:v1.2.3.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/rollprobe/rollprobe/internal/ociimage"
)

func main() {
	binary := flag.String("binary", "", "the static rollprobe binary (CGO_ENABLED=0)")
	ca := flag.String("ca", "/etc/ssl/certs/ca-certificates.crt", `CA bundle to ship ("" for none)`)
	arch := flag.String("arch", "amd64", "the binary's architecture (amd64, arm64)")
	names := flag.String("name", "docker.io/rollprobe/rollprobe:latest", "image references, comma-separated")
	out := flag.String("out", "", "the image tar to write")
	flag.Parse()
	if *binary == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "mkimage: -binary and -out are required")
		os.Exit(2)
	}
	if err := ociimage.CheckStatic(*binary); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(2)
	}
	img := ociimage.Release(strings.Split(*names, ","), *binary, *ca, *arch)
	if err := ociimage.WriteFile(*out, img); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	fmt.Println(*out)
}
