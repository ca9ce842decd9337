package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollprobe/rollprobe/lab/netns"
)

// identity is one static token's user.
type identity struct{ name, user, group string }

// identities the lab's components authenticate as. The control plane,
// kube-proxy and the edge (CoreDNS, Traefik) are in system:masters (the lab is a private test bed; RBAC stays
// on so that rollprobe's own permission checks are real); each kubelet is
// system:node:<name> in system:nodes, as the Node authorizer expects.
func identities(nodes []string) []identity {
	ids := []identity{
		{"admin", "lab-admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", "system:masters"},
		{"scheduler", "system:kube-scheduler", "system:masters"},
		{"kube-proxy", "system:kube-proxy", "system:masters"},
		{"coredns", "lab-coredns", "system:masters"},
		{"traefik", "lab-traefik", "system:masters"},
	}
	for _, n := range nodes {
		ids = append(ids, identity{"node:" + n, "system:node:" + n, "system:nodes"})
	}
	return ids
}

// writePKI creates the service-account key pair and the token file, and
// returns the token of each identity by name ("admin", "node:lab-node-1").
func writePKI(dir string, nodes []string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return nil, err
	}
	tokens := map[string]string{}
	var lines []string
	for i, id := range identities(nodes) {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		tok := hex.EncodeToString(b[:])
		tokens[id.name] = tok
		lines = append(lines, fmt.Sprintf(`%s,%s,%d,"%s"`, tok, id.user, 1000+i, id.group))
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	return tokens, nil
}

// kubeconfig returns a kubeconfig for server authenticated by token that
// verifies the apiserver's certificate: against caFile, the certificate
// and CA the apiserver makes itself in --cert-dir (apiServerCA), for the
// hub's address (a delay proxy in front of it is reached at another).
// The file is this machine's, and a client run outside the lab's
// namespaces reaches the hub's address on this machine's own network,
// where anything may answer: with verification off, whatever answered got
// the token (found running doctor from the host: a proxy there answered
// 404 and was sent the admin token). The apiserver writes caFile when it
// first starts, before any component reads its kubeconfig.
func kubeconfig(server, caFile, user, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    certificate-authority: %s
    tls-server-name: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: lab
  context:
    cluster: lab
    user: %s
    namespace: default
current-context: lab
`, server, caFile, netns.HubIP, user, token, user))
}

// writeEdgePKI creates the edge's CA (edge-ca.crt: what a client of the
// lab's https:// names trusts) and the certificate the edge serves for
// lab.example and every name in it (edge.crt, edge.key). A lab lives hours:
// a day of validity is enough, and a fresh lab gets fresh keys.
func writeEdgePKI(dir string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rollprobe lab edge CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "*." + netns.EdgeDomain},
		DNSNames:     []string{netns.EdgeDomain, "*." + netns.EdgeDomain},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		pem  []byte
		mode os.FileMode
	}{
		{"edge-ca.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644},
		{"edge.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), 0o644},
		{"edge.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.pem, f.mode); err != nil {
			return err
		}
	}
	return nil
}
