// Command mkimage writes rollprobe's release image (ociimage.Release) as
// an OCI image layout tar, without a Docker engine. For one architecture:
//
//	go run ./internal/ociimage/mkimage -binary dist/linux_amd64/rollprobe \
//	    -arch amd64 -name docker.io/rollprobe/rollprobe:v1.2.3 -out dist/rollprobe-image-amd64.tar
//
// For a goreleaser dist directory: one multi-platform image from every
// linux binary goreleaser built, named after the release's version,
// written to DIST/rollprobe_VERSION_image.tar:
//
//	go run ./internal/ociimage/mkimage -goreleaser dist
//
// A registry takes it with any OCI tool, e.g.
// skopeo copy --all oci-archive:dist/rollprobe_1.2.3_image.tar docker://docker.io/rollprobe/rollprobe:v1.2.3.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rollprobe/rollprobe/internal/ociimage"
)

// Repository is where the release image goes.
const Repository = "docker.io/rollprobe/rollprobe"

func main() {
	binary := flag.String("binary", "", "the static rollprobe binary (CGO_ENABLED=0)")
	ca := flag.String("ca", "/etc/ssl/certs/ca-certificates.crt", `CA bundle to ship ("" for none)`)
	arch := flag.String("arch", "amd64", "the binary's architecture (amd64, arm64)")
	names := flag.String("name", "", "image references, comma-separated (default "+Repository+":latest, or with -goreleaser :vVERSION, and :latest for a release)")
	out := flag.String("out", "", "the image tar to write (default with -goreleaser: DIST/rollprobe_VERSION_image.tar)")
	dist := flag.String("goreleaser", "", "a goreleaser dist directory: image every linux binary of its artifacts.json")
	flag.Parse()
	var err error
	switch {
	case *dist != "" && *binary == "":
		err = fromGoreleaser(*dist, *ca, *names, *out)
	case *binary != "" && *dist == "" && *out != "":
		err = single(*binary, *ca, *arch, *names, *out)
	default:
		fmt.Fprintln(os.Stderr, "mkimage: want -binary FILE -out FILE, or -goreleaser DIST")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func single(binary, ca, arch, names, out string) error {
	if names == "" {
		names = Repository + ":latest"
	}
	if err := ociimage.CheckStatic(binary); err != nil {
		return err
	}
	if err := ociimage.WriteFile(out, ociimage.Release(strings.Split(names, ","), binary, ca, arch)); err != nil {
		return err
	}
	fmt.Println(out)
	return nil
}

// artifact is the part of goreleaser's dist/artifacts.json read here.
type artifact struct {
	Type   string `json:"type"`
	Path   string `json:"path"`
	Goos   string `json:"goos"`
	Goarch string `json:"goarch"`
}

// metadata is the part of goreleaser's dist/metadata.json read here.
type metadata struct {
	Version string `json:"version"`
}

func fromGoreleaser(dist, ca, names, out string) error {
	var arts []artifact
	var meta metadata
	if err := readJSON(filepath.Join(dist, "artifacts.json"), &arts); err != nil {
		return err
	}
	if err := readJSON(filepath.Join(dist, "metadata.json"), &meta); err != nil {
		return err
	}
	if meta.Version == "" {
		return errors.New("metadata.json has no version")
	}
	var imgs []ociimage.Image
	for _, a := range arts {
		if a.Type != "Binary" || a.Goos != "linux" {
			continue
		}
		// artifacts.json paths are relative to where goreleaser ran, the
		// dist directory's parent.
		path := a.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(filepath.Clean(dist)), path)
		}
		if err := ociimage.CheckStatic(path); err != nil {
			return err
		}
		imgs = append(imgs, ociimage.Release(nil, path, ca, a.Goarch))
	}
	if len(imgs) == 0 {
		return fmt.Errorf("%s lists no linux binary", filepath.Join(dist, "artifacts.json"))
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].Architecture < imgs[j].Architecture })
	if names == "" {
		names = Repository + ":v" + meta.Version
		if !strings.Contains(meta.Version, "-") { // a release, not a snapshot or pre-release
			names += "," + Repository + ":latest"
		}
	}
	if out == "" {
		out = filepath.Join(dist, "rollprobe_"+meta.Version+"_image.tar")
	}
	if err := ociimage.WriteIndexFile(out, strings.Split(names, ","), imgs); err != nil {
		return err
	}
	fmt.Println(out)
	return nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
