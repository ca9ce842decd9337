package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/rollprobe/rollprobe/rollout"
)

// --server and --token reach the client without any kubeconfig file, as a
// CI job passes them; -n sets the namespace.
func TestServerAndTokenFlags(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	var k kubeFlags
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	k.bind(fs)
	if err := fs.Parse([]string{"--server", "https://10.0.0.1:6443", "--token", "s3cret", "-n", "prod", "--as", "ci-bot",
		"--insecure-skip-tls-verify", "--kube-request-timeout", "7s"}); err != nil {
		t.Fatal(err)
	}
	_, cfg, ns, err := k.connection()
	if err != nil {
		t.Fatal(err)
	}
	// The bound is each call's context's (rollout.Bound), never the HTTP
	// client's: that would cut watches and attach streams too.
	if cfg.Host != "https://10.0.0.1:6443" || cfg.BearerToken != "s3cret" || ns != "prod" || cfg.Impersonate.UserName != "ci-bot" ||
		!cfg.Insecure || cfg.Timeout != 0 || rollout.CallTimeout() != 7*time.Second {
		t.Fatalf("config host %q token %q ns %q as %q insecure %v client timeout %v call bound %v", cfg.Host, cfg.BearerToken, ns,
			cfg.Impersonate.UserName, cfg.Insecure, cfg.Timeout, rollout.CallTimeout())
	}
	rollout.SetCallTimeout(0)
}

// A kubeconfig whose user authenticates with the oidc auth-provider loads
// (client-go knows the provider only if it is registered).
func TestOIDCKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443"}
users:
- name: u
  user:
    auth-provider:
      name: oidc
      config: {client-id: rollprobe, idp-issuer-url: "https://idp.example", id-token: x.y.z}
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: web}
current-context: ctx
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	k := kubeFlags{kubeconfig: path}
	if _, _, ns, err := k.connection(); err != nil || ns != "web" {
		t.Fatalf("ns %q, err %v", ns, err)
	}
}

// --patch on a Rollout is sent as a JSON merge patch (a custom resource
// takes no strategic merge patch); on the built-in kinds, as a strategic
// one; a bad patch is an error whatever the kind.
func TestPatchForKind(t *testing.T) {
	data := []byte(`{"spec":{"template":{"metadata":{"labels":{"v":"2"}}}}}`)
	for kind, merge := range map[rollout.Kind]bool{rollout.KindRollout: true, rollout.KindDeployment: false, rollout.KindStatefulSet: false, rollout.KindDaemonSet: false} {
		p, err := patchFor(kind, data)
		if err != nil || p.Merge != merge {
			t.Errorf("%s: patch %+v, %v: want Merge %v", kind, p, err, merge)
		}
	}
	if _, err := patchFor(rollout.KindRollout, []byte("{not json")); err == nil {
		t.Error("a bad patch was accepted")
	}
}

// A kubeconfig that cannot be found says which: the --kubeconfig given,
// or KUBECONFIG's files (client-go skips a missing one without a word),
// or that none is set.
func TestMissingKubeconfigSaysWhich(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	t.Setenv("HOME", dir)
	for _, tc := range []struct {
		name, env string
		args      []string
		want      string
	}{
		{"--kubeconfig missing", "", []string{"--kubeconfig", missing}, "--kubeconfig " + missing + ": no such file or directory"},
		{"KUBECONFIG missing", missing, nil, "no kubeconfig: KUBECONFIG=" + missing + ": no such file; pass --kubeconfig"},
		{"one of KUBECONFIG's missing", missing + ":" + empty, nil, "no kubeconfig: KUBECONFIG=" + missing + ":" + empty + ": no such file: " + missing + ";"},
		{"KUBECONFIG without a cluster", empty, nil, "no kubeconfig: KUBECONFIG=" + empty + " names no cluster"},
		{"none", "", nil, "no kubeconfig: pass --kubeconfig (or --server and --token), set KUBECONFIG, or create ~/.kube/config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			var k kubeFlags
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			k.bind(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := k.connection()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
