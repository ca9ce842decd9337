// Package edgelog reads an ingress's access log for where it forwarded
// each of a run's requests: the edge's own record, as conntrack is the
// kernel's. It reads Traefik's JSON access log (one object a line, the
// request ID header kept: --accesslog.format=json and
// --accesslog.fields.headers.names.X-Request-Id=keep), whose ServiceAddr
// is the backend address Traefik chose for the request.
package edgelog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// FormatTraefik names Traefik's JSON access log.
const FormatTraefik = "traefik"

// Entry is what the edge logged of one request.
type Entry struct {
	// Upstream is the backend address (ip:port) it forwarded the request
	// to; empty when it chose none (no route, no server).
	Upstream string
	// Status is what it answered the client; OriginStatus what the backend
	// answered it (0: no answer, the edge made its own).
	Status, OriginStatus int
	// Start is when the edge received the request, by its own clock
	// (StartUTC); zero when the line has none.
	Start time.Time
	// Overhead is the time the request spent inside the edge outside the
	// attempt that answered it (Traefik's Overhead): failed attempts and
	// a retry middleware's backoff, besides the edge's own work. (Its
	// RetryAttempts would count the retries, but Traefik v3.6 never fills
	// it: accesslog.SaveRetries is wired to no retry middleware.)
	Overhead time.Duration
	// Duration is the request's whole time inside the edge, from receiving
	// it to logging it (Traefik's Duration); 0 when the line has none. An
	// edge logs a request when it ends, so a request it held on a backend
	// that never answered is as long as that wait, whatever the client did.
	Duration time.Duration
}

// Log is the entries of a run's requests, by request ID.
type Log struct {
	ByID map[string]Entry
	// Unreadable counts lines that name one of the run's request IDs and
	// are not a JSON object (a line cut short, say); Duplicates the run's
	// request IDs found on more than one line, left out of ByID (a log
	// gathered twice, say: which line is the request is not known).
	Unreadable, Duplicates int
}

// maxLine bounds one line (Traefik's lines are about 1 KiB; headers the
// user keeps add to that).
const maxLine = 1 << 20

// ReadTraefik reads Traefik's JSON access log from r, keeping the lines
// whose request ID (the value of the header idHeader, which Traefik logs
// as the field "request_<idHeader>") begins with one of prefixes followed
// by "-" (a run's IDs are RUNID-N). Only the lines that contain such a
// prefix are decoded: a busy edge's log holds many other clients'.
func ReadTraefik(r io.Reader, idHeader string, prefixes []string) (Log, error) {
	log := Log{ByID: map[string]Entry{}}
	field := "request_" + idHeader
	dup := map[string]bool{}
	marks := make([][]byte, len(prefixes))
	for i, p := range prefixes {
		marks[i] = []byte(p + "-")
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		if !slices.ContainsFunc(marks, func(m []byte) bool { return bytes.Contains(line, m) }) {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(line, &obj); err != nil {
			log.Unreadable++
			continue
		}
		id := stringField(obj, field)
		if !ours(id, prefixes) {
			continue
		}
		if _, seen := log.ByID[id]; seen || dup[id] {
			dup[id] = true
			delete(log.ByID, id)
			continue
		}
		start, _ := time.Parse(time.RFC3339Nano, stringField(obj, "StartUTC"))
		log.ByID[id] = Entry{Upstream: stringField(obj, "ServiceAddr"),
			Status: intField(obj, "DownstreamStatus"), OriginStatus: intField(obj, "OriginStatus"), Start: start,
			Overhead: time.Duration(intField(obj, "Overhead")), Duration: time.Duration(intField(obj, "Duration"))}
	}
	log.Duplicates = len(dup)
	if err := sc.Err(); err != nil {
		return log, fmt.Errorf("read the access log: %w", err)
	}
	return log, nil
}

// ReadTraefikFile is ReadTraefik of the file at path.
func ReadTraefikFile(path, idHeader string, prefixes []string) (Log, error) {
	f, err := os.Open(path)
	if err != nil {
		return Log{}, err
	}
	defer f.Close()
	return ReadTraefik(f, idHeader, prefixes)
}

// CheckReadable says why the file at path cannot be read, nil when it can
// (a run checks it before changing anything; the log is read at the end).
func CheckReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.IsDir() {
		return errors.New(path + " is a directory")
	}
	return nil
}

// stringField is obj[key] as a string, "" when absent or not a string. The
// key is matched without regard to case: Traefik keeps a header's name as
// the user configured it.
func stringField(obj map[string]json.RawMessage, key string) string {
	raw, ok := obj[key]
	if !ok {
		for k, v := range obj {
			if strings.EqualFold(k, key) {
				raw, ok = v, true
				break
			}
		}
	}
	var s string
	if !ok || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func intField(obj map[string]json.RawMessage, key string) int {
	var n int
	if raw, ok := obj[key]; ok && json.Unmarshal(raw, &n) == nil {
		return n
	}
	return 0
}

func ours(id string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(id, p+"-") {
			return true
		}
	}
	return false
}
