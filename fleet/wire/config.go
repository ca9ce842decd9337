package wire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/rollprobe/rollprobe/prober"
)

// ProberConfig is a prober's configuration as the CLI sends it over the
// attach stream (command "config"), never in the pod's spec: headers such
// as Authorization and credentials in the URL must not be stored in the
// cluster's objects.
type ProberConfig struct {
	Target           string      `json:"target"`
	Method           string      `json:"method"`
	Header           http.Header `json:"header,omitempty"`
	Body             []byte      `json:"body,omitempty"`
	Rate             float64     `json:"rate"`
	Concurrency      int         `json:"concurrency"`
	Workers          int         `json:"workers"`
	MaxWorkers       int         `json:"max_workers"`
	Conn             string      `json:"conn"`
	TimeoutNS        int64       `json:"timeout_ns"`
	ConnectTimeoutNS int64       `json:"connect_timeout_ns"`
	Insecure         bool        `json:"insecure,omitempty"`
	CACert           []byte      `json:"ca_cert,omitempty"`
	ConnectTo        string      `json:"connect_to,omitempty"`
	ExpectStatus     string      `json:"expect_status"`
	BackendHeader    string      `json:"backend_header,omitempty"`
	RequestIDHeader  string      `json:"request_id_header"`
	KeepFailures     int         `json:"keep_failures"`
	Engine           string      `json:"engine,omitempty"`
	Protocol         string      `json:"protocol,omitempty"`
	Connections      int         `json:"connections,omitempty"`
	Streams          int         `json:"streams,omitempty"`
	GRPCMethod       string      `json:"grpc_method,omitempty"`
	GRPCClient       string      `json:"grpc_client,omitempty"`
}

// FromConfig is cfg as the CLI sends it (Duration is not sent: the CLI
// says when to stop).
func FromConfig(cfg prober.Config) ProberConfig {
	return ProberConfig{Target: cfg.Target.String(), Method: cfg.Method, Header: cfg.Header, Body: cfg.Body,
		Rate: cfg.Rate, Concurrency: cfg.Concurrency, Workers: cfg.Workers, MaxWorkers: cfg.MaxWorkers,
		Conn: cfg.Conn.String(), TimeoutNS: int64(cfg.Timeout), ConnectTimeoutNS: int64(cfg.ConnectTimeout),
		Insecure: cfg.Insecure, CACert: cfg.CACert, ConnectTo: cfg.ConnectTo, ExpectStatus: cfg.ExpectStatus.String(), BackendHeader: cfg.BackendHeader,
		RequestIDHeader: cfg.RequestIDHeader, KeepFailures: cfg.KeepFailures, Engine: string(cfg.Engine),
		Protocol: string(cfg.Protocol), Connections: cfg.Connections, Streams: cfg.Streams, GRPCMethod: cfg.GRPCMethod,
		GRPCClient: string(cfg.GRPCClient)}
}

// Config is the prober.Config c describes, validated.
func (c ProberConfig) Config() (prober.Config, error) {
	cfg := prober.DefaultConfig()
	var err error
	if cfg.Target, err = prober.ParseTarget(c.Target); err != nil {
		return cfg, err
	}
	if cfg.Conn, err = prober.ParseConnMode(c.Conn); err != nil {
		return cfg, err
	}
	if cfg.ExpectStatus, err = prober.ParseStatusSet(c.ExpectStatus); err != nil {
		return cfg, err
	}
	if cfg.Engine, err = prober.ParseEngine(c.Engine); err != nil {
		return cfg, err
	}
	if cfg.Protocol, err = prober.ParseProtocol(c.Protocol); err != nil {
		return cfg, err
	}
	if c.Connections > 0 {
		cfg.Connections = c.Connections
	}
	cfg.Streams = c.Streams
	if c.GRPCMethod != "" {
		cfg.GRPCMethod = c.GRPCMethod
	}
	if c.GRPCClient != "" {
		cfg.GRPCClient = prober.GRPCClient(c.GRPCClient)
	}
	cfg.Method, cfg.Header, cfg.Body = c.Method, c.Header, c.Body
	if cfg.Header == nil {
		cfg.Header = http.Header{}
	}
	cfg.Rate, cfg.Concurrency, cfg.Workers, cfg.MaxWorkers = c.Rate, c.Concurrency, c.Workers, c.MaxWorkers
	cfg.Timeout, cfg.ConnectTimeout, cfg.Insecure = time.Duration(c.TimeoutNS), time.Duration(c.ConnectTimeoutNS), c.Insecure
	cfg.BackendHeader, cfg.RequestIDHeader, cfg.KeepFailures = c.BackendHeader, c.RequestIDHeader, c.KeepFailures
	cfg.CACert, cfg.ConnectTo = c.CACert, c.ConnectTo
	cfg.Duration = 0
	return cfg, cfg.Validate()
}

// ConfigCommand is the stdin command that carries c.
func ConfigCommand(c ProberConfig) (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return "config " + string(b) + "\n", nil
}

// ParseConfigCommand reads the JSON after "config ".
func ParseConfigCommand(arg string) (ProberConfig, error) {
	var c ProberConfig
	if err := json.Unmarshal([]byte(arg), &c); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	return c, nil
}
