package htmlreport

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

// chromium finds Debian's Chromium, or skips (fails under
// ROLLPROBE_REQUIRE_BROWSER=1, as CI sets it).
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("short: no browser")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_BROWSER", "no chromium on PATH (apt-get install chromium)")
	}
	return path
}

// artifactDir is where the browser test keeps its screenshots:
// $ROLLPROBE_ARTIFACTS, or test-artifacts/ at the repository's root.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ROLLPROBE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// headless runs Chromium on url with a fresh profile and no network
// (--disable-background-networking and friends: the machine's closed
// network otherwise refuses its connections at every start), returning
// stdout and the page's console lines.
func headless(t *testing.T, browser, url string, args ...string) (stdout string, console []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}
	cmd := exec.CommandContext(ctx, browser, append(append(base, args...), url)...)
	// Chromium starts helper processes (renderer, GPU, zygote): in a
	// process group of its own they end with it, killed by its PID's
	// group if the timeout stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // any helper left behind; ESRCH when none is
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	for _, line := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			console = append(console, line)
		}
	}
	return out.String(), console
}

// The naive run's page in a real browser: its script runs to the end with
// nothing on the console, a zoom given in the address is applied to every
// plot, and the screenshot (kept in the artifacts) shows the bars, the
// failures and the outage bands.
func TestInBrowser(t *testing.T) {
	browser := chromium(t)
	dir := artifactDir(t)
	page := filepath.Join(dir, "naive.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(f, lab(t, "naive")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	dom, console := headless(t, browser, "file://"+page+"#zoom=3,8.5", "--dump-dom")
	if len(console) > 0 {
		t.Errorf("the page wrote to the console (it never logs: these are errors):\n%s", strings.Join(console, "\n"))
	}
	root := regexp.MustCompile(`<html[^>]*>`).FindString(dom)
	if !strings.Contains(root, `data-rendered="ok"`) || strings.Contains(root, "data-error") {
		t.Errorf("the script did not finish cleanly: %s", root)
	}
	plots := regexp.MustCompile(`<svg class="plot plot-(\w+)"[^>]*viewBox="([^"]*)"`).FindAllStringSubmatch(dom, -1)
	if len(plots) < 5 {
		t.Fatalf("%d plots in the rendered page, want rate, failstrip, latency, lanes, overlay", len(plots))
	}
	for _, p := range plots {
		if !strings.HasPrefix(p[2], "3 0 5.5 ") {
			t.Errorf("plot %s: viewBox %q after #zoom=3,8.5, want 3 0 5.5 ...", p[1], p[2])
		}
	}
	if !strings.Contains(dom, "3.00s to 8.50s") {
		t.Errorf("the zoom range is not shown")
	}

	shot := filepath.Join(dir, "naive.png")
	if _, console := headless(t, browser, "file://"+page, "--window-size=1300,1000", "--screenshot="+shot); len(console) > 0 {
		t.Errorf("console while taking the screenshot:\n%s", strings.Join(console, "\n"))
	}
	img := readPNG(t, shot)
	t.Logf("screenshot: %s (%v)", shot, img.Bounds().Size())
	for _, c := range []struct {
		name string
		rgb  color.RGBA
	}{
		{"ok bars", hex(classColor["ok"])},
		{"refused", hex(classColor["refused"])},
		{"connect_timeout", hex(classColor["connect_timeout"])},
		{"ready pods", hex(stateColor[podReady])},
		{"terminating pods", hex(stateColor[podTerminating])},
	} {
		if n := countNear(img, c.rgb); n < 20 {
			t.Errorf("the screenshot shows %d pixels of %s (%v): not drawn", n, c.name, c.rgb)
		}
	}
}

func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func hex(s string) color.RGBA {
	var c color.RGBA
	c.A = 255
	for i, p := range []*uint8{&c.R, &c.G, &c.B} {
		var v uint8
		for _, ch := range s[1+2*i : 3+2*i] {
			v <<= 4
			switch {
			case ch >= '0' && ch <= '9':
				v |= uint8(ch - '0')
			default:
				v |= uint8(ch-'a') + 10
			}
		}
		*p = v
	}
	return c
}

// countNear counts pixels within a small distance of c (antialiasing and
// the outage band's tint shift colours a little).
func countNear(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near8(r, c.R) && near8(g, c.G) && near8(bl, c.B) {
				n++
			}
		}
	}
	return n
}

func near8(v uint32, want uint8) bool {
	d := int(v>>8) - int(want)
	return d > -8 && d < 8
}
