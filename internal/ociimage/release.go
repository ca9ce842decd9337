package ociimage

import (
	"debug/elf"
	"fmt"
)

// ReleaseUser is the release image's user: not root, and not a user with
// a home or a shell (distroless' nonroot).
const ReleaseUser = "65532:65532"

// CABundlePath is where the release image keeps the CA certificates (Go's
// crypto/x509 looks there on Linux).
const CABundlePath = "etc/ssl/certs/ca-certificates.crt"

// Release is rollprobe's release image: the static binary at /rollprobe
// as the entrypoint, the CA bundle for HTTPS targets (none when caBundle
// is ""), a non-root user, nothing else: no shell, no package manager.
// The lab imports this same image as rollprobe/rollprobe, so the prober
// pods its tests run are what a release ships.
func Release(names []string, binary, caBundle, arch string) Image {
	img := Image{
		Names:        names,
		Architecture: arch,
		User:         ReleaseUser,
		Entrypoint:   []string{"/rollprobe"},
		Env:          []string{"PATH=/"},
		Files:        []File{{Path: "rollprobe", Mode: 0o755, Source: binary}},
	}
	if caBundle != "" {
		img.Files = append(img.Files, File{Path: CABundlePath, Mode: 0o644, Source: caBundle})
	}
	return img
}

// CheckStatic reports why the binary at path cannot run in an image with no
// C library: it is not ELF, or it is dynamically linked.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("binary %s is dynamically linked; an image has no C library: build it with CGO_ENABLED=0 (make build does)", path)
		}
	}
	return nil
}
