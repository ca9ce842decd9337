// Package atomicfile writes files so that a reader (a CI step uploading an
// artifact, say) sees either the old file or the whole new one, never half,
// and never replaces what is not a plain file: a device (/dev/null), a FIFO
// or a descriptor (/dev/stdout) is written in place.
package atomicfile

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// nameMax is the longest file name (one path component) the file systems
// rollprobe writes to accept: NAME_MAX on Linux and macOS.
const nameMax = 255

// Write calls write with a temporary file in path's directory, syncs it,
// gives it the mode of the file it replaces (0644 for a new one) and
// renames it over path. A symbolic link at path is written through: its
// target is replaced, the link stays. On any error path is left as it was
// and the temporary file is removed.
//
// What is not a regular file is never replaced: a path that exists and is
// a device, a FIFO or a socket is opened and written in place. A
// descriptor of this process (/dev/stdout, /dev/fd/1, /proc/self/fd/1) is
// written through the descriptor itself, at its current offset: opening it
// anew would start at offset 0 of a redirected file and overwrite what the
// shell's redirection already holds, and replacing its target would leave
// the shell writing to an unlinked file.
func Write(path string, write func(io.Writer) error) error {
	if InPlace(path) {
		if err := writeInPlace(path, write); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	}
	// The temporary file is named after its target, so a write cut short
	// by SIGKILL leaves a file the next write of the same path removes.
	prefix := tempPrefix(filepath.Base(path))
	if stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), globEscape(prefix)+"*")); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), prefix+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, bare(err))
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	err = write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, bare(err))
	}
	return nil
}

// CheckWritable reports, without changing anything, why Write(path) would
// fail now: the directory is missing or not writable (a temporary file of
// the very name Write would use is created there and removed), the name is
// too long, or path is a directory. For what Write writes in place, it
// checks that the file or descriptor is open for writing. Commands call it
// before they send or change anything, so a bad output path is a usage
// error, not evidence thrown away at the end. Its errors name path, never
// the temporary file.
func CheckWritable(path string) error {
	if InPlace(path) {
		if fd, ok := descriptor(path); ok {
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
			if err != nil || flags&unix.O_ACCMODE == unix.O_RDONLY {
				return fmt.Errorf("cannot write %s: descriptor %d is not open for writing", path, fd)
			}
			return nil
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s is a directory", path)
	case errors.Is(err, unix.ENAMETOOLONG):
		return fmt.Errorf("cannot write %s: %w", path, unix.ENAMETOOLONG)
	}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	if len(filepath.Base(path)) > nameMax {
		return fmt.Errorf("cannot write %s: %w", path, unix.ENAMETOOLONG)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), tempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, bare(err))
	}
	name := tmp.Name()
	_ = tmp.Close()
	return os.Remove(name)
}

// SameFile reports whether a and b name one file: the same existing file
// (through links, hard or symbolic), or the same place for a file yet to
// be written (their directories resolved).
func SameFile(a, b string) bool {
	fa, erra := os.Stat(a)
	fb, errb := os.Stat(b)
	if erra == nil && errb == nil {
		return os.SameFile(fa, fb)
	}
	if erra == nil || errb == nil {
		return false // one exists, the other does not
	}
	return resolved(a) == resolved(b)
}

// resolved is where a not-yet-existing path would be created: a dangling
// link followed to its target, that target's directory with links
// resolved, and its name.
func resolved(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	for range 40 { // Linux's MAXSYMLINKS
		target, err := os.Readlink(abs)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(abs), target)
		}
		abs = target
	}
	dir, base := filepath.Split(abs)
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	return filepath.Join(dir, base)
}

// InPlace says whether Write writes path where it is rather than replacing
// it (what it writes then adds to what the reader already has):
// a descriptor of this process (/dev/stdout, /dev/fd/N, which may stand
// for a redirected regular file), or an existing file that is not regular
// (a FIFO, a device, a socket). A regular file anywhere, /dev/shm
// included, is replaced atomically; a directory is neither (Write fails).
func InPlace(path string) bool {
	if _, ok := descriptor(path); ok {
		return true
	}
	fi, err := os.Stat(path)
	return err == nil && !fi.Mode().IsRegular() && !fi.IsDir()
}

// descriptor is the open descriptor of this process a path names:
// /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N.
func descriptor(path string) (int, bool) {
	switch p := filepath.Clean(path); {
	case p == "/dev/stdout":
		return 1, true
	case p == "/dev/stderr":
		return 2, true
	case strings.HasPrefix(p, "/dev/fd/"), strings.HasPrefix(p, "/proc/self/fd/"):
		n, err := strconv.Atoi(filepath.Base(p))
		return n, err == nil && n >= 0
	}
	return 0, false
}

// writeInPlace writes through the descriptor path names, or opens path for
// writing (no truncation: a device or FIFO has nothing to truncate).
func writeInPlace(path string, write func(io.Writer) error) error {
	if fd, ok := descriptor(path); ok {
		// Not closed: the descriptor belongs to the process.
		return write(fdWriter(fd))
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return bare(err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fdWriter writes to a descriptor this package does not own.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(int(w), p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// tempPrefix is the temporary file's name before CreateTemp's random
// digits (at most 10): named after the target so that a stale one is
// found again, and cut (with a hash of the whole name, to stay unique) so
// that the temporary name is never longer than the longest name allowed:
// otherwise a name that fits would fail only at the end of a run.
func tempPrefix(base string) string {
	p := ".rollprobe-" + base + "-"
	if len(p)+10 <= nameMax {
		return p
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(base))
	sum := strconv.FormatUint(uint64(h.Sum32()), 16)
	keep := nameMax - 10 - len(".rollprobe-") - len(sum) - 2
	return ".rollprobe-" + base[:keep] + "-" + sum + "-"
}

// bare is err without the file name a *fs.PathError or *os.LinkError
// carries (the temporary file's): the caller names the path it was asked
// to write. A writer's own wrapped error is kept whole.
func bare(err error) error {
	switch e := err.(type) {
	case *fs.PathError:
		return e.Err
	case *os.LinkError:
		return e.Err
	}
	return err
}

// globEscape quotes the glob metacharacters of a literal file name.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
