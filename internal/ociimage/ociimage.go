// Package ociimage writes container images without a Docker engine or a
// registry: an OCI image layout (oci-layout, index.json, blobs) as one tar
// stream, from a static binary and a few files. containerd imports it with
// `ctr images import`; the same layout is what a registry push uploads.
//
// The image has one uncompressed layer, so its digest is its diff ID, and
// every tar entry has mtime 0 and fixed owners: the same inputs always give
// the same digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image spec.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// File is one entry of the image's file system. Exactly one of Source
// (a file on this machine, copied), Data or Link is set.
type File struct {
	Path   string // inside the image, e.g. "bin/demoapp"
	Mode   int64  // permission bits, e.g. 0o755
	Source string
	Data   []byte
	Link   string // a symlink's target
}

// Image is what to write.
type Image struct {
	// Names are the full references the image is imported as, e.g.
	// "docker.io/rollprobe/demoapp:v1" (the CRI normalises short names, so
	// an image a manifest calls rollprobe/demoapp:v1 must be imported under
	// its docker.io name). One layout can carry many names.
	Names      []string
	Files      []File
	Entrypoint []string
	Env        []string // default: PATH=/bin
	User       string   // e.g. "65534"; "" runs as root
	// Architecture of the binaries, e.g. "amd64" (default "amd64").
	Architecture string
}

// base is the skeleton every image has: the directories a container
// runtime mounts over or a Go program expects, and users root and nobody.
var base = []File{
	{Path: "bin", Mode: 0o755}, {Path: "dev", Mode: 0o755}, {Path: "etc", Mode: 0o755},
	{Path: "proc", Mode: 0o755}, {Path: "sys", Mode: 0o755}, {Path: "tmp", Mode: 0o1777},
	{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
	{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\n")},
}

// Write writes img as an OCI image layout tar to w.
func Write(w io.Writer, img Image) error {
	if len(img.Names) == 0 {
		return errors.New("ociimage: an image needs at least one name")
	}
	blobs, manifest, err := build(img)
	if err != nil {
		return err
	}
	return writeLayout(w, blobs, manifest, img.Names)
}

// WriteIndex writes one image for several platforms (one Image per
// architecture, their Names ignored) as a layout whose index.json names an
// image index: a registry push with `skopeo copy --all` uploads every
// platform under names, and a pull picks the puller's.
func WriteIndex(w io.Writer, names []string, imgs []Image) error {
	if len(names) == 0 {
		return errors.New("ociimage: an image needs at least one name")
	}
	if len(imgs) == 0 {
		return errors.New("ociimage: an index needs at least one image")
	}
	var all []layoutBlob
	var manifests []descriptor
	seen := map[string]bool{}
	for _, img := range imgs {
		blobs, manifest, err := build(img)
		if err != nil {
			return err
		}
		if seen[manifest.Platform.Architecture] {
			return fmt.Errorf("ociimage: two images for linux/%s", manifest.Platform.Architecture)
		}
		seen[manifest.Platform.Architecture] = true
		all = append(all, blobs...)
		manifests = append(manifests, manifest)
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": MediaTypeIndex, "manifests": manifests})
	if err != nil {
		return err
	}
	indexDesc := describe(MediaTypeIndex, index)
	return writeLayout(w, append(all, layoutBlob{indexDesc, index}), indexDesc, names)
}

// WriteIndexFile is WriteIndex to a file, like WriteFile.
func WriteIndexFile(path string, names []string, imgs []Image) error {
	return writeFile(path, func(w io.Writer) error { return WriteIndex(w, names, imgs) })
}

// layoutBlob is one content-addressed file of a layout.
type layoutBlob struct {
	d    descriptor
	data []byte
}

// build makes an image's layer, config and manifest; the manifest's
// descriptor carries its platform.
func build(img Image) ([]layoutBlob, descriptor, error) {
	if len(img.Entrypoint) == 0 {
		return nil, descriptor{}, errors.New("ociimage: an image needs an entrypoint")
	}
	layer, err := layerTar(append(append([]File(nil), base...), img.Files...))
	if err != nil {
		return nil, descriptor{}, err
	}
	arch := img.Architecture
	if arch == "" {
		arch = "amd64"
	}
	env := img.Env
	if env == nil {
		env = []string{"PATH=/bin"}
	}
	layerDesc := describe(MediaTypeLayer, layer)
	config, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.Entrypoint, "Env": env, "WorkingDir": "/", "User": img.User},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return nil, descriptor{}, err
	}
	configDesc := describe(MediaTypeConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return nil, descriptor{}, err
	}
	manifestDesc := describe(MediaTypeManifest, manifest)
	manifestDesc.Platform = &platform{Architecture: arch, OS: "linux"}
	return []layoutBlob{{layerDesc, layer}, {configDesc, config}, {manifestDesc, manifest}}, manifestDesc, nil
}

// writeLayout writes the blobs and an index.json naming top (a manifest or
// an index) under every name.
func writeLayout(w io.Writer, blobs []layoutBlob, top descriptor, names []string) error {
	var entries []descriptor
	for _, name := range names {
		d := top
		d.Annotations = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tagOf(name)}
		entries = append(entries, d)
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": MediaTypeIndex, "manifests": entries})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(header(name, tar.TypeReg, 0o644, int64(len(data)))); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := tw.WriteHeader(header("blobs", tar.TypeDir, 0o755, 0)); err != nil {
		return err
	}
	if err := tw.WriteHeader(header("blobs/sha256", tar.TypeDir, 0o755, 0)); err != nil {
		return err
	}
	written := map[string]bool{}
	for _, b := range blobs {
		if written[b.d.Digest] { // the same base layer or config twice
			continue
		}
		written[b.d.Digest] = true
		if err := add("blobs/sha256/"+strings.TrimPrefix(b.d.Digest, "sha256:"), b.data); err != nil {
			return err
		}
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	return tw.Close()
}

// WriteFile writes img to path (through a temporary file, so a reader never
// sees half an image).
func WriteFile(path string, img Image) error {
	return writeFile(path, func(w io.Writer) error { return Write(w, img) })
}

func writeFile(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("image %s: %w", path, err)
	}
	return nil
}

// layerTar is the layer: every directory a file needs, then the files, in
// path order.
func layerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if p == "." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("ociimage: bad path %q", f.Path)
		}
		f.Path = p
		byPath[p] = f
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = File{Path: dir, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		switch {
		case f.Link != "":
			h := header(p, tar.TypeSymlink, 0o777, 0)
			h.Linkname = f.Link
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		case f.Source != "" || f.Data != nil:
			data := f.Data
			if f.Source != "" {
				var err error
				if data, err = os.ReadFile(f.Source); err != nil {
					return nil, fmt.Errorf("ociimage: %w", err)
				}
			}
			if err := tw.WriteHeader(header(p, tar.TypeReg, f.Mode, int64(len(data)))); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		default:
			if err := tw.WriteHeader(header(p, tar.TypeDir, f.Mode, 0)); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func header(name string, typ byte, mode, size int64) *tar.Header {
	if typ == tar.TypeDir {
		name += "/"
	}
	return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: time.Unix(0, 0),
		Uname: "root", Gname: "root", Format: tar.FormatPAX}
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func describe(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// tagOf is the tag of a reference ("latest" when it has none).
func tagOf(ref string) string {
	name := ref[strings.LastIndex(ref, "/")+1:]
	if _, tag, ok := strings.Cut(name, ":"); ok {
		return tag
	}
	return "latest"
}
