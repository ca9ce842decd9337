// Package edgelog reads an ingress's access log for where it forwarded
// each of a run's requests: the edge's own record, as conntrack is the
// kernel's. It reads two formats, each one JSON object a line with the
// request ID header kept:
//   - Traefik's JSON access log (--accesslog.format=json and
//     --accesslog.fields.headers.names.X-Request-Id=keep), whose
//     ServiceAddr is the backend address Traefik chose for the request;
//   - nginx's, in the log_format NginxLogFormat (nginx and the ingresses
//     and gateways built on it), whose $upstream_addr lists the backend
//     addresses nginx tried, the last the one that answered or failed.
package edgelog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The formats Read reads. FormatAuto tells them apart by the first of
// the run's lines: nginx's has upstream_addr or msec, Traefik's
// DownstreamStatus or StartUTC.
const (
	FormatAuto    = "auto"
	FormatTraefik = "traefik"
	FormatNginx   = "nginx"
)

// Formats are the values a format may take, FormatAuto first.
var Formats = []string{FormatAuto, FormatTraefik, FormatNginx}

// NginxLogFormat is the log_format nginx must write for FormatNginx, the
// request ID header being X-Request-Id ($http_x_request_id; another
// header's variable and key are named the same way). escape=json keeps
// every value a JSON string or number; the lists nginx writes when it
// tried several backends ("a, b") stay strings.
const NginxLogFormat = `log_format rollprobe escape=json '{"msec":"$msec","request_time":"$request_time","status":"$status",'
    '"upstream_addr":"$upstream_addr","upstream_status":"$upstream_status",'
    '"upstream_response_time":"$upstream_response_time","http_x_request_id":"$http_x_request_id"}';`

// Entry is what the edge logged of one request.
type Entry struct {
	// Upstream is the backend address (ip:port) it forwarded the request
	// to (nginx: the last it tried); empty when it chose none (no route,
	// no server).
	Upstream string
	// Status is what it answered the client; OriginStatus what the backend
	// answered it (0: no answer, the edge made its own; both edges also
	// log their own 502 for a backend they could not reach as its status).
	Status, OriginStatus int
	// Start is when the edge received the request, by its own clock
	// (StartUTC; nginx: $msec less $request_time, to the millisecond);
	// zero when the line has none.
	Start time.Time
	// Overhead is the time the request spent inside the edge outside the
	// attempt that answered it (Traefik's Overhead; nginx: $request_time
	// less the last $upstream_response_time): failed attempts and
	// a retry middleware's backoff, besides the edge's own work. (Its
	// RetryAttempts would count the retries, but Traefik v3.6 never fills
	// it: accesslog.SaveRetries is wired to no retry middleware.)
	Overhead time.Duration
	// Tried is how many backends the edge sent the request to, in turn,
	// each but the last failing it (nginx lists them; 1 for a request
	// sent once). Traefik logs only the last (Tried is 0 in its lines:
	// not known).
	Tried int
	// FailedOn are the backend addresses (ip:port) of the attempts before
	// the last, in turn: each failed the request and the edge tried the
	// next (nginx's list; a unix socket is left out). Empty for a request
	// sent once, and in Traefik's lines (not known).
	FailedOn []string
	// Duration is the request's whole time inside the edge, from receiving
	// it to logging it (Traefik's Duration, nginx's $request_time); 0 when
	// the line has none. An
	// edge logs a request when it ends, so a request it held on a backend
	// that never answered is as long as that wait, whatever the client did.
	Duration time.Duration
}

// Log is the entries of a run's requests, by request ID.
type Log struct {
	ByID map[string]Entry
	// Format is the format its lines were read in: the one given, or the
	// one the first of the run's lines showed (FormatAuto: none did).
	Format string
	// Unreadable counts lines that name one of the run's request IDs and
	// are not a JSON object (a line cut short, say), or, before the
	// format is known, one of neither format; Duplicates the run's
	// request IDs found on more than one line, left out of ByID (a log
	// gathered twice, say: which line is the request is not known).
	Unreadable, Duplicates int
}

// maxLine bounds one line (Traefik's lines are about 1 KiB; headers the
// user keeps add to that).
const maxLine = 1 << 20

// Read reads an access log in format (one of Formats) from r, keeping the
// lines whose request ID (the value of the header idHeader: Traefik logs
// it as the field "request_<idHeader>", nginx's log_format names it as
// its variable, "http_x_request_id" for X-Request-Id) begins with one of
// prefixes followed by "-" (a run's IDs are RUNID-N). Only the lines
// that contain such a prefix are decoded: a busy edge's log holds many
// other clients'.
func Read(r io.Reader, format, idHeader string, prefixes []string) (Log, error) {
	if !slices.Contains(Formats, format) {
		return Log{}, fmt.Errorf("access log format %q: want one of %s", format, strings.Join(Formats, ", "))
	}
	log := Log{ByID: map[string]Entry{}, Format: format}
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
		if log.Format == FormatAuto {
			switch {
			case hasField(obj, "upstream_addr") || hasField(obj, "msec"):
				log.Format = FormatNginx
			case hasField(obj, "DownstreamStatus") || hasField(obj, "StartUTC"):
				log.Format = FormatTraefik
			default:
				log.Unreadable++
				continue
			}
		}
		id := stringField(obj, idField(log.Format, idHeader))
		if !ours(id, prefixes) {
			continue
		}
		if _, seen := log.ByID[id]; seen || dup[id] {
			dup[id] = true
			delete(log.ByID, id)
			continue
		}
		if log.Format == FormatNginx {
			log.ByID[id] = nginxEntry(obj)
		} else {
			log.ByID[id] = traefikEntry(obj)
		}
	}
	log.Duplicates = len(dup)
	if err := sc.Err(); err != nil {
		return log, fmt.Errorf("read the access log: %w", err)
	}
	return log, nil
}

// Retried counts the entries whose request the edge sent to more than
// one backend, each attempt but the last failing; known is false where
// the format names only the last attempt (Traefik's): not 0, unknown.
func (l Log) Retried() (n int, known bool) {
	if l.Format != FormatNginx {
		return 0, false
	}
	for _, e := range l.ByID {
		if e.Tried > 1 {
			n++
		}
	}
	return n, true
}

// ReadFile is Read of the file at path.
func ReadFile(path, format, idHeader string, prefixes []string) (Log, error) {
	f, err := os.Open(path)
	if err != nil {
		return Log{}, err
	}
	defer f.Close()
	return Read(f, format, idHeader, prefixes)
}

// idField is the key a line of format holds the request ID header under.
func idField(format, idHeader string) string {
	if format == FormatNginx {
		return "http_" + strings.ToLower(strings.ReplaceAll(idHeader, "-", "_"))
	}
	return "request_" + idHeader
}

func traefikEntry(obj map[string]json.RawMessage) Entry {
	start, _ := time.Parse(time.RFC3339Nano, stringField(obj, "StartUTC"))
	return Entry{Upstream: stringField(obj, "ServiceAddr"),
		Status: intField(obj, "DownstreamStatus"), OriginStatus: intField(obj, "OriginStatus"), Start: start,
		Overhead: time.Duration(intField(obj, "Overhead")), Duration: time.Duration(intField(obj, "Duration"))}
}

// nginxEntry reads a line of NginxLogFormat. nginx logs a request when it
// ends ($msec, to the millisecond), so it began $request_time before. The
// upstream variables list every server tried, in turn ("a, b", and " : "
// between the groups of an internal redirect), and when none was left to
// try next, the upstream group's name where an address would be: a
// request that failed on a and then found no live server is "a, naive".
// The last address in the list is the pod the request went to last, the
// one that answered it or failed it; its status and time are the same
// place in their lists, and the time outside its attempt is the attempts
// before it and nginx's own. A list with no address (the group's name
// alone, a unix socket) names no backend; a socket's answer is still the
// origin's status.
func nginxEntry(obj map[string]json.RawMessage) Entry {
	e := Entry{Status: intOf(numberField(obj, "status"))}
	addrs := tried(stringField(obj, "upstream_addr"))
	last := -1 // the last server tried: an address, or a unix socket
	for i, a := range addrs {
		if _, err := netip.ParseAddrPort(a); err == nil || strings.HasPrefix(a, "unix:") {
			last = i
			e.Tried++
		}
	}
	took, tookOK := seconds(numberField(obj, "request_time"))
	if tookOK {
		e.Duration = took
	}
	if end, ok := seconds(numberField(obj, "msec")); ok && tookOK {
		e.Start = time.Unix(0, int64(end-took)).UTC()
	}
	if last < 0 {
		return e
	}
	for _, a := range addrs[:last] {
		if _, err := netip.ParseAddrPort(a); err == nil {
			e.FailedOn = append(e.FailedOn, a)
		}
	}
	if !strings.HasPrefix(addrs[last], "unix:") {
		e.Upstream = addrs[last]
	}
	if statuses := tried(numberField(obj, "upstream_status")); len(statuses) == len(addrs) {
		e.OriginStatus = intOf(statuses[last])
	}
	if times := tried(numberField(obj, "upstream_response_time")); len(times) == len(addrs) {
		if its, ok := seconds(times[last]); ok && tookOK && took > its {
			e.Overhead = took - its
		}
	}
	return e
}

// tried splits an nginx upstream variable's list into its entries, in
// the order nginx tried them.
func tried(list string) []string {
	var out []string
	for _, group := range strings.Split(list, " : ") {
		for _, s := range strings.Split(group, ",") {
			out = append(out, strings.TrimSpace(s))
		}
	}
	return out
}

// seconds parses nginx's seconds with a fraction ("0.005",
// "1764583200.123") exactly; false for "-", empty or anything else.
func seconds(s string) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > 9 || strings.ContainsAny(whole+frac, "+-") {
		return 0, false
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec > int64(time.Duration(1<<63-1)/time.Second)-1 {
		return 0, false
	}
	var ns int64
	if frac != "" {
		n, err := strconv.ParseInt(frac, 10, 64)
		if err != nil {
			return 0, false
		}
		ns = n
		for range 9 - len(frac) {
			ns *= 10
		}
	}
	return time.Duration(sec)*time.Second + time.Duration(ns), true
}

func intOf(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
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
	raw, ok := field(obj, key)
	var s string
	if !ok || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// numberField is obj[key] as text, whether nginx wrote it as a JSON string
// or a number; "" when absent or neither.
func numberField(obj map[string]json.RawMessage, key string) string {
	if s := stringField(obj, key); s != "" {
		return s
	}
	raw, ok := field(obj, key)
	var n json.Number
	if !ok || json.Unmarshal(raw, &n) != nil {
		return ""
	}
	return n.String()
}

// hasField: obj has key, matched as stringField does.
func hasField(obj map[string]json.RawMessage, key string) bool {
	_, ok := field(obj, key)
	return ok
}

// field is obj[key], the key matched without regard to case when no key
// matches it exactly.
func field(obj map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	if raw, ok := obj[key]; ok {
		return raw, true
	}
	for k, v := range obj {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

// intField is obj[key] as an integer, 0 when absent or not one. Its keys
// are Traefik's own fields, written in one case; only the request ID
// header's field is spelt as the user configured it (field).
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
