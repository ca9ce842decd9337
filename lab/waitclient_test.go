package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitHTTP's client trusts an https server only by the certificate it is
// given (the lab's apiserver's own): the server's own certificate passes,
// another's fails verification, and a missing file is an error, not an
// unverified connection.
func TestWaitClientVerifiesTheServer(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	certOf := func(der []byte, name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Another self-signed certificate for the same address.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	otherDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	get := func(caFile string) error {
		c, err := waitClient(srv.URL, caFile, d.DialContext)
		if err != nil {
			return err
		}
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(certOf(srv.Certificate().Raw, "own.crt")); err != nil {
		t.Errorf("the server's own certificate: %v", err)
	}
	if err := get(certOf(otherDER, "other.crt")); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("another server's certificate: %v, want a verification error", err)
	}
	if err := get(filepath.Join(dir, "absent.crt")); err == nil {
		t.Error("no certificate file: no error")
	}
}
