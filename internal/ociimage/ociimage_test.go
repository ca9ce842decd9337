package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readTar returns a tar stream's regular files and the header of every entry.
func readTar(t *testing.T, data []byte) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[strings.TrimSuffix(h.Name, "/")] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// blob returns the blob a digest names, checking that its content hashes
// to that digest.
func blob(t *testing.T, files map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing", digest)
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		t.Fatalf("blob %s hashes to %s", digest, got)
	}
	return b
}

// manifestOf is what an image manifest points to.
type manifestOf struct {
	Config descriptor   `json:"config"`
	Layers []descriptor `json:"layers"`
}

// unpack reads an image layout tar: its files, its index's entries, and
// the manifest of the first.
func unpack(t *testing.T, data []byte) (map[string][]byte, []descriptor, manifestOf) {
	t.Helper()
	files, _ := readTar(t, data)
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) == 0 {
		t.Fatal("an empty index")
	}
	var manifest manifestOf
	if err := json.Unmarshal(blob(t, files, index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	return files, index.Manifests, manifest
}

func TestLayoutIsConsistent(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(bin, []byte("\x7fELF pretend binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := Image{
		Names:      []string{"docker.io/rollprobe/demoapp:v1", "docker.io/rollprobe/demoapp:v2"},
		Files:      []File{{Path: "/bin/demoapp", Mode: 0o755, Source: bin}, {Path: "usr/local/bin/sh", Link: "/bin/demoapp"}},
		Entrypoint: []string{"/bin/demoapp"},
		User:       "65534",
	}
	var out bytes.Buffer
	if err := Write(&out, img); err != nil {
		t.Fatal(err)
	}
	files, index, manifest := unpack(t, out.Bytes())
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout %q", files["oci-layout"])
	}
	if len(index) != 2 || index[1].Annotations["io.containerd.image.name"] != "docker.io/rollprobe/demoapp:v2" ||
		index[1].Annotations["org.opencontainers.image.ref.name"] != "v2" {
		t.Fatalf("index: %+v", index)
	}
	var config struct {
		Config struct {
			Entrypoint []string
			User       string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Layers) != 1 || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Fatalf("an uncompressed layer's diff ID is its digest: layers %+v, diff IDs %v", manifest.Layers, config.RootFS.DiffIDs)
	}
	if config.Config.Entrypoint[0] != "/bin/demoapp" || config.Config.User != "65534" {
		t.Fatalf("config %+v", config.Config)
	}
	layerFiles, headers := readTar(t, blob(t, files, manifest.Layers[0].Digest))
	if string(layerFiles["bin/demoapp"]) != "\x7fELF pretend binary" || headers["bin/demoapp"].Mode != 0o755 {
		t.Fatalf("bin/demoapp: %q mode %o", layerFiles["bin/demoapp"], headers["bin/demoapp"].Mode)
	}
	if h := headers["usr/local/bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/demoapp" {
		t.Fatalf("symlink: %+v", h)
	}
	for _, dir := range []string{"usr", "usr/local", "usr/local/bin", "tmp", "proc"} {
		if h := headers[dir]; h == nil || h.Typeflag != tar.TypeDir {
			t.Errorf("directory %s missing from the layer", dir)
		}
	}
	if !strings.Contains(string(layerFiles["etc/passwd"]), "nobody:x:65534") {
		t.Errorf("etc/passwd: %q", layerFiles["etc/passwd"])
	}

	// The same inputs give the same bytes (mtimes and owners are fixed).
	var again bytes.Buffer
	if err := Write(&again, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Fatal("two writes of one image differ")
	}
}

func TestBadImages(t *testing.T) {
	for name, img := range map[string]Image{
		"no name":       {Entrypoint: []string{"/bin/x"}},
		"no entrypoint": {Names: []string{"x:1"}},
		"escaping path": {Names: []string{"x:1"}, Entrypoint: []string{"/bin/x"}, Files: []File{{Path: "../etc/x", Data: []byte("x")}}},
		"missing file":  {Names: []string{"x:1"}, Entrypoint: []string{"/bin/x"}, Files: []File{{Path: "bin/x", Source: "/nonexistent/x"}}},
	} {
		if err := Write(io.Discard, img); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The release image: the binary at /rollprobe as the entrypoint, the CA
// bundle where Go looks for it, a non-root user, and no shell.
func TestReleaseImage(t *testing.T) {
	dir := t.TempDir()
	bin, ca := filepath.Join(dir, "rollprobe"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(bin, []byte("\x7fELF rollprobe"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Write(&out, Release([]string{"docker.io/rollprobe/rollprobe:v1.0.0"}, bin, ca, "arm64")); err != nil {
		t.Fatal(err)
	}
	files, index, manifest := unpack(t, out.Bytes())
	if len(index) != 1 || index[0].Platform.Architecture != "arm64" {
		t.Fatalf("index %+v", index)
	}
	var config struct {
		Architecture string
		Config       struct {
			Entrypoint []string
			User       string
		} `json:"config"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	if config.Architecture != "arm64" || strings.Join(config.Config.Entrypoint, " ") != "/rollprobe" || config.Config.User != ReleaseUser {
		t.Fatalf("config %+v", config)
	}
	layer, headers := readTar(t, blob(t, files, manifest.Layers[0].Digest))
	if string(layer["rollprobe"]) != "\x7fELF rollprobe" || headers["rollprobe"].Mode != 0o755 {
		t.Fatalf("rollprobe: %q mode %o", layer["rollprobe"], headers["rollprobe"].Mode)
	}
	if !strings.HasPrefix(string(layer[CABundlePath]), "-----BEGIN CERTIFICATE") {
		t.Fatalf("no CA bundle at %s", CABundlePath)
	}
	for name := range layer {
		if strings.HasSuffix(name, "/sh") || name == "bin/busybox" {
			t.Errorf("the release image carries a shell: %s", name)
		}
	}
}

// A dynamically linked binary cannot go into an image without a C library.
func TestCheckStatic(t *testing.T) {
	if err := CheckStatic("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("/bin/sh: %v", err)
	}
}

// One image for two platforms: index.json names an image index whose
// manifests carry their platforms, each pointing at a config of that
// architecture and a layer with that platform's binary.
func TestIndexForTwoPlatforms(t *testing.T) {
	dir := t.TempDir()
	var imgs []Image
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(dir, arch)
		if err := os.WriteFile(bin, []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, Release([]string{"ignored"}, bin, "", arch))
	}
	var out bytes.Buffer
	if err := WriteIndex(&out, []string{"docker.io/rollprobe/rollprobe:v1.2.3"}, imgs); err != nil {
		t.Fatal(err)
	}
	files, top, _ := unpack(t, out.Bytes())
	if len(top) != 1 || top[0].MediaType != MediaTypeIndex || top[0].Annotations["org.opencontainers.image.ref.name"] != "v1.2.3" {
		t.Fatalf("index.json: %+v", top)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(blob(t, files, top[0].Digest), &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 2 {
		t.Fatalf("image index: %+v", index)
	}
	for i, arch := range []string{"amd64", "arm64"} {
		d := index.Manifests[i]
		if d.MediaType != MediaTypeManifest || d.Platform == nil || d.Platform.Architecture != arch || d.Platform.OS != "linux" {
			t.Fatalf("manifest %d: %+v", i, d)
		}
		var m manifestOf
		if err := json.Unmarshal(blob(t, files, d.Digest), &m); err != nil {
			t.Fatal(err)
		}
		var config struct {
			Architecture string `json:"architecture"`
		}
		if err := json.Unmarshal(blob(t, files, m.Config.Digest), &config); err != nil || config.Architecture != arch {
			t.Fatalf("%s config: %+v %v", arch, config, err)
		}
		layer, _ := readTar(t, blob(t, files, m.Layers[0].Digest))
		if string(layer["rollprobe"]) != "binary for "+arch {
			t.Errorf("%s layer has %q", arch, layer["rollprobe"])
		}
	}
	if err := WriteIndex(&out, []string{"x"}, []Image{imgs[0], imgs[0]}); err == nil {
		t.Error("two images for one platform were accepted")
	}
}
