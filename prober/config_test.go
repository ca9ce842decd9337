package prober

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rollprobe/rollprobe/internal/field"
)

func TestParseConnMode(t *testing.T) {
	for in, want := range map[string]float64{"new": 1, "keepalive": 0, "mixed=0.25": 0.25, "mixed=1": 1} {
		m, err := ParseConnMode(in)
		if err != nil || m.FreshFraction != want {
			t.Errorf("ParseConnMode(%q) = %v, %v", in, m, err)
		}
	}
	for _, bad := range []string{"", "fresh", "mixed=", "mixed=1.5", "mixed=-0.1", "mixed=x"} {
		if _, err := ParseConnMode(bad); err == nil {
			t.Errorf("ParseConnMode(%q): want an error", bad)
		}
	}
}

func TestParseStatusSet(t *testing.T) {
	for _, bad := range []string{"", "abc", "99", "200-", "300-200", "200-1000", "200,,204"} {
		if _, err := ParseStatusSet(bad); err == nil {
			t.Errorf("ParseStatusSet(%q): want an error", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	target, _ := ParseTarget("http://127.0.0.1:1/")
	httpsTarget, _ := ParseTarget("https://127.0.0.1:1/")
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // the field the error names (internal/field); "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"closed model", func(c *Config) { c.Rate = 0 }, ""},
		{"negative rate", func(c *Config) { c.Rate = -1 }, "Rate"},
		{"closed without workers", func(c *Config) { c.Rate, c.Concurrency = 0, 0 }, "Concurrency"},
		{"max below initial", func(c *Config) { c.Workers, c.MaxWorkers = 10, 5 }, "MaxWorkers"},
		{"zero timeout", func(c *Config) { c.Timeout = 0 }, "Timeout"},
		{"negative duration", func(c *Config) { c.Duration = -time.Second }, "Duration"},
		{"reserved header", func(c *Config) { c.Header = http.Header{"Connection": {"close"}} }, "Header"},
		{"no target", func(c *Config) { c.Target = nil }, "Target"},
		{"CA for https", func(c *Config) { c.Target, c.CACert = httpsTarget, selfSignedCA(t) }, ""},
		{"CA for http", func(c *Config) { c.CACert = selfSignedCA(t) }, "CACert"},
		{"CA and insecure", func(c *Config) { c.Target, c.CACert, c.Insecure = httpsTarget, selfSignedCA(t), true }, "CACert"},
		{"CA without a certificate", func(c *Config) { c.Target, c.CACert = httpsTarget, []byte("not PEM") }, "CACert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Target = target
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "":
				var fe *field.Error
				if !errors.As(err, &fe) || fe.Field != tt.want {
					t.Fatalf("error %v, want a field error naming %s (never a flag)", err, tt.want)
				}
				if strings.Contains(err.Error(), "--") {
					t.Fatalf("the prober named a flag: %v", err)
				}
			}
		})
	}
	for _, bad := range []string{"127.0.0.1:80", "ftp://x/", "http://", "://x"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q): want an error", bad)
		}
	}
}

func TestRequestTemplate(t *testing.T) {
	c := DefaultConfig()
	c.Target, _ = ParseTarget("http://svc.ns:8080/healthz?x=1")
	c.Method = "POST"
	c.Body = []byte("{}")
	c.Header = http.Header{"X-Team": {"sre"}}
	tpl := newRequestTemplate(&c, "abcd", "rollprobe/test")
	got := string(tpl.build(nil, 42, true))
	for _, want := range []string{
		"POST /healthz?x=1 HTTP/1.1\r\n", "Host: svc.ns:8080\r\n", "User-Agent: rollprobe/test\r\n",
		"X-Team: sre\r\n", "Content-Length: 2\r\n", "Connection: close\r\n", "X-Request-Id: abcd-42\r\n\r\n{}",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("request lacks %q:\n%s", want, got)
		}
	}
	if ka := string(tpl.build(nil, 43, false)); strings.Contains(ka, "Connection:") {
		t.Errorf("kept-alive request must not ask to close:\n%s", ka)
	}
}

func TestTokensAndTargets(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{{"GET", true}, {"M-SEARCH", true}, {"GE T", false}, {"GET\r\n", false}, {"", false}, {"GET/", false}} {
		if got := validToken(tt.s); got != tt.want {
			t.Errorf("validToken(%q) = %v", tt.s, got)
		}
	}
	for _, bad := range []string{"http://h:0/", "http://h:65536/", "http://h:x/", "h:80/", "//h/"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) accepted", bad)
		}
	}
	if _, err := ParseTarget("http://h:65535/"); err != nil {
		t.Error(err)
	}
	c := DefaultConfig()
	c.Target, _ = ParseTarget("http://h/")
	c.Header = http.Header{"X-A": {"b\r\nX-B: c"}}
	var fe *field.Error
	if err := c.Validate(); !errors.As(err, &fe) || fe.Field != "Header" {
		t.Errorf("a header value with CRLF: %v", err)
	}
}

func TestRedactTarget(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://host/x", "http://host/x"},
		{"http://alice:pw@host/", "http://alice:xxxxx@host/"},
		{"http://T0KEN@host/", "http://xxxxx@host/"},
		{"https://h/p?a=1&token=s&TOKEN=s&b", "https://h/p?a=1&token=xxxxx&TOKEN=xxxxx&b"},
		{"https://h/p?X-Amz-Signature=abc%2Fdef&X-Amz-Date=1", "https://h/p?X-Amz-Signature=xxxxx&X-Amz-Date=1"},
		{"https://h/p?to%6Ben=s", "https://h/p?to%6Ben=xxxxx"}, // an escaped name is still the name
		{"https://h/p?mine=s&keep=k", "https://h/p?mine=xxxxx&keep=k"},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := RedactTarget(u, []string{"MINE"}); got != tc.want {
			t.Errorf("RedactTarget(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := RedactURL("ftp://bob:Hunter2@host/ x"); strings.Contains(got, "Hunter2") {
		t.Errorf("RedactURL of a URL that does not parse: %s", got)
	}
	// With nothing to hide, a URL is shown as the user gave it (an error
	// about "http://" quoted "http:"); with something, redacted.
	for in, want := range map[string]string{
		"http://":              "http://",
		"http://h?token=s":     "http://h?token=xxxxx",
		"http://bob:pw@h:80/x": "http://bob:xxxxx@h:80/x",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := ParseTarget("http://"); err == nil || !strings.Contains(err.Error(), `"http://"`) {
		t.Errorf("ParseTarget(http://): %v, want the URL quoted as given", err)
	}
}
