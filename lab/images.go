package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rollprobe/rollprobe/internal/ociimage"
)

// ImageTags are the tags every mapped image is imported under: the lab has
// no registry, so a tag exists only if it was imported. Any other tag, like
// any unmapped image, fails to pull (ErrImagePull), as a bad image does.
var ImageTags = []string{"v1", "v2", "v3", "latest"}

// busybox is Debian's static busybox (busybox-static): the images carry it
// so exec hooks and probes can run sh, sleep, cat or wget.
const busybox = "/bin/busybox"

var busyboxApplets = []string{"sh", "sleep", "cat", "ls", "wget", "ps", "kill", "date", "echo", "true", "false", "nc"}

// fullImageName is the reference the CRI resolves a short name to
// (rollprobe/demoapp:v1 -> docker.io/rollprobe/demoapp:v1): images must be
// imported under it to be found.
func fullImageName(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return ref
	default:
		return "docker.io/" + ref
	}
}

// checkImageBinaries checks that every binary an image runs exists and is
// static: an image has no C library for a dynamic one to load.
func checkImageBinaries(c Config) error {
	if c.Pause == "" {
		return errors.New("lab: no pause binary (the pod sandbox image)")
	}
	if _, err := os.Stat(busybox); err != nil {
		return fmt.Errorf("the lab's images carry %s for exec hooks (Debian: apt-get install busybox-static, or make lab-deps): %w", busybox, err)
	}
	bins := map[string]string{"pause": c.Pause}
	for repo, path := range c.Images {
		bins[repo] = path
	}
	for image, path := range bins {
		if err := ociimage.CheckStatic(path); err != nil {
			return fmt.Errorf("image %s: %w", image, err)
		}
	}
	return nil
}

// ReleaseRepo is rollprobe's own image repository.
const ReleaseRepo = "rollprobe/rollprobe"

// hostCABundle is this machine's CA bundle for the release image ("" when
// there is none: the lab's targets are plain HTTP).
func hostCABundle() string {
	const debian = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(debian); err == nil {
		return debian
	}
	return ""
}

// writeImages writes one OCI image tarball per mapped repository (under
// every tag in ImageTags) and the sandbox image, and returns their paths.
func (c Config) writeImages() ([]string, error) {
	repos := make([]string, 0, len(c.Images))
	for repo := range c.Images {
		repos = append(repos, repo)
	}
	sort.Strings(repos)
	var paths []string
	write := func(file string, img ociimage.Image) error {
		path := c.path("images", file+".tar")
		if err := ociimage.WriteFile(path, img); err != nil {
			return err
		}
		paths = append(paths, path)
		return nil
	}
	files := func(bin string) []ociimage.File {
		fs := []ociimage.File{
			{Path: "bin/" + filepath.Base(bin), Mode: 0o755, Source: bin},
			{Path: "bin/busybox", Mode: 0o755, Source: busybox},
		}
		for _, a := range busyboxApplets {
			fs = append(fs, ociimage.File{Path: "bin/" + a, Link: "busybox"})
		}
		return fs
	}
	for i, repo := range repos {
		bin := c.Images[repo]
		var names []string
		for _, tag := range ImageTags {
			names = append(names, fullImageName(repo+":"+tag))
		}
		c.logf("image %s (%s) from %s", repo, strings.Join(ImageTags, ", "), bin)
		img := ociimage.Image{Names: names, Files: files(bin), Entrypoint: []string{"/bin/" + filepath.Base(bin)}}
		if repo == ReleaseRepo {
			// rollprobe's own image is the release image, not one made
			// for the lab: the prober pods run what a release ships.
			img = ociimage.Release(names, bin, hostCABundle(), "amd64")
		}
		if err := write(fmt.Sprintf("image-%d", i), img); err != nil {
			return nil, err
		}
	}
	pause := ociimage.Image{Names: []string{sandboxImage}, Files: []ociimage.File{{Path: "bin/pause", Mode: 0o755, Source: c.Pause}},
		Entrypoint: []string{"/bin/pause", "pause"}}
	if err := write("pause", pause); err != nil {
		return nil, err
	}
	return paths, nil
}
