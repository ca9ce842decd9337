package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rollprobe/rollprobe/internal/testenv"
)

func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "first"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error { io.WriteString(w, "half"); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the writer's error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d entries: temporary file left behind", len(entries))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if err := Write(filepath.Join(dir, "missing", "x"), func(io.Writer) error { return nil }); err == nil {
		t.Fatal("writing into a missing directory must fail")
	}
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritable(filepath.Join(dir, "r.json")); err != nil {
		t.Fatalf("a writable directory: %v", err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing", "r.json"), dir} {
		if err := CheckWritable(bad); err == nil {
			t.Errorf("CheckWritable(%s) accepted", bad)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the check left %d files behind", len(entries))
	}
}

// An existing file keeps its mode; a symbolic link is written through.
func TestWriteKeepsModeAndLinks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(p, text string) {
		t.Helper()
		if err := Write(p, func(w io.Writer) error { _, err := io.WriteString(w, text); return err }); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "new")
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old file's 0600", fi.Mode().Perm())
	}
	link := filepath.Join(dir, "latest.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	write(link, "through")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "through" {
		t.Errorf("the link's target holds %q", b)
	}
	fresh := filepath.Join(dir, "fresh.json")
	write(fresh, "x")
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o644 {
		t.Errorf("a new file's mode %v, want 0644", fi.Mode().Perm())
	}
}

// A temporary file left by a write that was killed is removed by the next
// write of the same path; another path's is left alone.
func TestWriteRemovesStaleTemporaries(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".rollprobe-report.json-123456")
	other := filepath.Join(dir, ".rollprobe-junit.xml-654321")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Write(filepath.Join(dir, "report.json"), func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale temporary file is still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another target's temporary file was removed: %v", err)
	}
}

// What is not a regular file is written in place, never replaced: a FIFO
// keeps being a FIFO (its reader gets the bytes), a character device stays
// the device, a regular file under /dev is appended to.
func TestWriteInPlace(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // opens for reading: Write's open then proceeds
		got <- string(b)
	}()
	if err := CheckWritable(fifo); err != nil {
		t.Fatalf("CheckWritable(fifo): %v", err)
	}
	if err := Write(fifo, func(w io.Writer) error { _, err := io.WriteString(w, "through the pipe"); return err }); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe" {
		t.Errorf("the reader got %q", s)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v %v", fi, err)
	}
	link := filepath.Join(dir, "null")
	if err := os.Symlink(os.DevNull, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{os.DevNull, link} {
		if err := Write(p, func(w io.Writer) error { _, err := io.WriteString(w, "gone"); return err }); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("%s: %s is no longer a character device: %v %v", p, os.DevNull, fi, err)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link to %s was replaced: %v", os.DevNull, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d entries: a temporary file was left behind", len(entries))
	}
}

// /dev/stdout and /dev/fd/N are written through the process's own
// descriptor at its offset: a redirected file keeps what was written
// before (reopening the path would write at offset 0 over it).
func TestWriteDescriptor(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "redirected"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := out.WriteString("summary line\n"); err != nil {
		t.Fatal(err)
	}
	path := "/dev/fd/" + strconv.Itoa(int(out.Fd()))
	if err := CheckWritable(path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "{report}\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out.Name()); string(b) != "summary line\n{report}\n" {
		t.Errorf("the redirected file holds %q", b)
	}
	if _, err := out.WriteString("after\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out.Name()); string(b) != "summary line\n{report}\nafter\n" {
		t.Errorf("the descriptor's own writes were overwritten: %q", b)
	}
	ro, err := os.Open(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := CheckWritable("/dev/fd/" + strconv.Itoa(int(ro.Fd()))); err == nil {
		t.Error("a read-only descriptor passed the check")
	}
}

// A name whose temporary file would be too long is written (the temporary
// name is cut); a name too long itself fails the check up front, and the
// check's error names the path, never its temporary file.
func TestLongNames(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("r", 250)+".json") // 255: the longest name allowed
	if err := CheckWritable(long); err != nil {
		t.Fatalf("CheckWritable(a 255-byte name): %v", err)
	}
	if err := Write(long, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Fatalf("Write(a 255-byte name): %v", err)
	}
	tooLong := filepath.Join(dir, strings.Repeat("r", 251)+".json")
	err := CheckWritable(tooLong)
	if !errors.Is(err, unix.ENAMETOOLONG) {
		t.Fatalf("CheckWritable(a 256-byte name) = %v, want ENAMETOOLONG", err)
	}
	if strings.Contains(err.Error(), ".rollprobe-") {
		t.Errorf("the error exposes the temporary file: %v", err)
	}
	err = CheckWritable(filepath.Join(dir, "missing", "r.json"))
	if err == nil || strings.Contains(err.Error(), ".rollprobe-") {
		t.Errorf("a missing directory: %v (must fail and not name the temporary file)", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries, want the one written", len(entries))
	}
}

func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.json")
	if err := os.Link(a, hard); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(dir, "d")
	if err := os.Symlink(dir, dirLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{a, a, true}, {a, link, true}, {a, hard, true},
		{filepath.Join(dir, "new.json"), filepath.Join(dirLink, "new.json"), true},
		{filepath.Join(dir, "new.json"), filepath.Join(dir, ".", "new.json"), true},
		{filepath.Join(dir, "new.json"), filepath.Join(dir, "other.json"), false},
		{a, filepath.Join(dir, "new.json"), false},
	} {
		if got := SameFile(tc.a, tc.b); got != tc.same {
			t.Errorf("SameFile(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// A regular file under /dev (tmpfs at /dev/shm) is an ordinary file:
// created when missing, replaced whole when present, never appended to.
func TestRegularFileUnderDev(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "rollprobe-test-")
	if err != nil {
		testenv.SkipOrFail(t, "ROLLPROBE_REQUIRE_TOOLS", "no /dev/shm here: %v", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "r.json")
	for _, text := range []string{"first", "second"} {
		if err := CheckWritable(path); err != nil {
			t.Fatal(err)
		}
		if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, text); return err }); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != text {
			t.Fatalf("%s holds %q, want %q", path, b, text)
		}
	}
}
