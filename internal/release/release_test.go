package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// dist is a release snapshot: the directory and its version.
type dist struct {
	dir, version string
}

func (d dist) path(name string) string { return filepath.Join(d.dir, name) }

func (d dist) archive(goos, goarch string) string {
	return "rollprobe_" + d.version + "_" + goos + "_" + goarch + ".tar.gz"
}

// snapshot finds the repository's dist/ from `make release-snapshot`.
func snapshot(t *testing.T) dist {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	d := dist{dir: filepath.Join(root, "dist")}
	data, err := os.ReadFile(d.path("metadata.json"))
	if err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_RELEASE", "no release snapshot (run make release-snapshot): %v", err)
	}
	var meta struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &meta); err != nil || meta.Version == "" {
		t.Fatalf("dist/metadata.json: %v %s", err, data)
	}
	d.version = meta.Version
	return d
}

var platforms = [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}

// untarred keeps each archive's files: unpacking is slow under -race.
var untarred sync.Map // path -> map[string][]byte

// untar returns the regular files of a .tar.gz (the same map for every
// caller: do not change it).
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	if files, ok := untarred.Load(path); ok {
		return files.(map[string][]byte)
	}
	files := readTarGz(t, path)
	untarred.Store(path, files)
	return files
}

func readTarGz(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// checksums reads checksums.txt: archive name to sha256.
func checksums(t *testing.T, d dist) map[string]string {
	t.Helper()
	data, err := os.ReadFile(d.path("checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("checksums.txt line %q", line)
		}
		sums[name] = sum
	}
	return sums
}

// Every platform has an archive with the binary, LICENSE and README; each
// binary is for its platform (and static on linux: the image and the
// prober pods need that); checksums.txt lists every archive with its
// sha256; and the binary says the release's version.
func TestArchives(t *testing.T) {
	d := snapshot(t)
	sums := checksums(t, d)
	if len(sums) != len(platforms) {
		t.Errorf("checksums.txt lists %d files, want the %d archives: %v", len(sums), len(platforms), sums)
	}
	license, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range platforms {
		name := d.archive(p[0], p[1])
		if got := sha256Of(t, d.path(name)); sums[name] != got {
			t.Errorf("%s: sha256 %s, checksums.txt says %q", name, got, sums[name])
		}
		files := untar(t, d.path(name))
		if !bytes.Equal(files["LICENSE"], license) || len(files["README.md"]) == 0 {
			t.Errorf("%s: LICENSE and README.md must ship in it (krew and most companies refuse a binary without its license)", name)
		}
		bin := files["rollprobe"]
		switch p[0] {
		case "linux":
			f, err := elf.NewFile(bytes.NewReader(bin))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p[1]]
			if f.Machine != want {
				t.Errorf("%s: an ELF for %v", name, f.Machine)
			}
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP {
					t.Errorf("%s: dynamically linked (CGO_ENABLED=0 is needed for the image)", name)
				}
			}
		case "darwin":
			f, err := macho.NewFile(bytes.NewReader(bin))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[p[1]]
			if f.Cpu != want {
				t.Errorf("%s: a Mach-O for %v", name, f.Cpu)
			}
		}
	}
	// The host's own binary runs and names its version, v-prefixed: the
	// tag of the release image its probers default to.
	host := filepath.Join(t.TempDir(), "rollprobe")
	if err := os.WriteFile(host, untar(t, d.path(d.archive(runtime.GOOS, runtime.GOARCH)))["rollprobe"], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(host, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "v"+d.version) {
		t.Errorf("rollprobe version: %v\n%s", err, out)
	}
	help, _ := exec.Command(host, "run", "--help").CombinedOutput()
	if !strings.Contains(string(help), "rollprobe/rollprobe:") {
		t.Errorf("run --help names no prober image:\n%s", help)
	}
}

// krewManifest is the part of a krew plugin manifest checked here.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			URI      string `json:"uri"`
			SHA256   string `json:"sha256"`
			Bin      string `json:"bin"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Files []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

// The krew manifest follows krew's rules (apiVersion, a lower-case name
// that is the file's, a v-prefixed semver, a short description krew's
// index accepts, one platform per archive with its checksum), and
// installing it the way `kubectl krew install --manifest --archive` does
// (krew itself is not in the module proxy) gives a kubectl-rollprobe whose
// help says `kubectl rollprobe`.
func TestKrewManifest(t *testing.T) {
	d := snapshot(t)
	data, err := os.ReadFile(d.path("krew/rollprobe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.UnmarshalStrict(data, &m, func(dec *json.Decoder) *json.Decoder { return dec }); err != nil {
		// Strict: a field krew does not know is a mistake in the config.
		t.Fatalf("manifest: %v\n%s", err, data)
	}
	semver := regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)
	switch {
	case m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin":
		t.Errorf("apiVersion %q kind %q", m.APIVersion, m.Kind)
	case m.Metadata.Name != "rollprobe":
		t.Errorf("name %q: must be the file's name, rollprobe.yaml", m.Metadata.Name)
	case !semver.MatchString(m.Spec.Version) || m.Spec.Version != "v"+d.version:
		t.Errorf("version %q, want v%s", m.Spec.Version, d.version)
	case m.Spec.ShortDescription == "" || len(m.Spec.ShortDescription) > 50 || strings.HasSuffix(m.Spec.ShortDescription, "."):
		t.Errorf("shortDescription %q: krew-index wants it short (<= 50), no final period", m.Spec.ShortDescription)
	case m.Spec.Homepage == "" || m.Spec.Description == "" || m.Spec.Caveats == "":
		t.Errorf("homepage, description and caveats are expected: %+v", m.Spec)
	case len(m.Spec.Platforms) != len(platforms):
		t.Fatalf("%d platforms, want %d", len(m.Spec.Platforms), len(platforms))
	}
	sums := checksums(t, d)
	var mine string
	var bin string
	for _, p := range m.Spec.Platforms {
		os, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		name := d.archive(os, arch)
		if !strings.HasSuffix(p.URI, "/"+name) || !strings.HasPrefix(p.URI, "https://github.com/rollprobe/rollprobe/releases/download/") {
			t.Errorf("%s/%s: uri %q", os, arch, p.URI)
		}
		if p.SHA256 != sums[name] {
			t.Errorf("%s/%s: sha256 %s, checksums.txt has %s", os, arch, p.SHA256, sums[name])
		}
		if os == runtime.GOOS && arch == runtime.GOARCH {
			mine, bin = name, p.Bin
			if len(p.Files) > 0 {
				t.Errorf("files %+v: this install copies everything (krew's default when files is absent)", p.Files)
			}
		}
	}
	if mine == "" {
		t.Fatalf("no platform for %s/%s", runtime.GOOS, runtime.GOARCH)
	}

	// Install as krew does: check the archive's sha256 against the
	// manifest, unpack it into the plugin's directory, and link
	// bin/kubectl-<name> to the platform's bin.
	root := t.TempDir()
	if got := sha256Of(t, d.path(mine)); got != sums[mine] {
		t.Fatalf("archive sha256 %s", got)
	}
	installDir := filepath.Join(root, "store", m.Metadata.Name, m.Spec.Version)
	for name, data := range untar(t, d.path(mine)) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(installDir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(installDir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "bin", "kubectl-"+m.Metadata.Name)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(installDir, bin), link); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(link, "run", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kubectl rollprobe run --deployment") || !strings.Contains(string(out), "--token string") ||
		!strings.Contains(string(out), "--as string") {
		t.Fatalf("kubectl-rollprobe run --help: %v\n%s", err, out)
	}
}

// The image is one multi-platform index (linux/amd64 and linux/arm64) that
// skopeo, an OCI tool nobody here wrote, reads and copies whole; each
// platform's image runs the release binary of that platform as a non-root
// user.
func TestImage(t *testing.T) {
	d := snapshot(t)
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_RELEASE", "skopeo (Debian package) is needed to read the image: %v", err)
	}
	ref := "oci-archive:" + d.path("rollprobe_"+d.version+"_image.tar") + ":v" + d.version
	raw, err := exec.Command(skopeo, "inspect", "--raw", ref).Output()
	if err != nil {
		t.Fatalf("skopeo inspect --raw %s: %v", ref, err)
	}
	var index struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			Platform struct{ Architecture, OS string } `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &index); err != nil || index.MediaType != "application/vnd.oci.image.index.v1+json" || len(index.Manifests) != 2 {
		t.Fatalf("not a two-platform index: %v\n%s", err, raw)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		out, err := exec.Command(skopeo, "inspect", "--override-os", "linux", "--override-arch", arch, "--config", ref).Output()
		if err != nil {
			t.Fatalf("skopeo inspect --config (%s): %v", arch, err)
		}
		var config struct {
			Architecture string `json:"architecture"`
			Config       struct {
				User       string
				Entrypoint []string
			} `json:"config"`
		}
		if err := json.Unmarshal(out, &config); err != nil {
			t.Fatal(err)
		}
		if config.Architecture != arch || config.Config.User != "65532:65532" || strings.Join(config.Config.Entrypoint, " ") != "/rollprobe" {
			t.Errorf("%s config: %+v", arch, config)
		}
	}
	// A copy checks every blob against its digest, as a registry push does.
	copyOut, err := exec.Command(skopeo, "copy", "--all", "--quiet", ref, "oci:"+filepath.Join(t.TempDir(), "copy")+":v"+d.version).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy --all: %v\n%s", err, copyOut)
	}
}
