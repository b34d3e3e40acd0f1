package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestTLS connects with rediss:// to a redis-server that speaks TLS with a
// self-signed certificate: accepted with skip_verify=true, refused with
// exit 4 and one line otherwise.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	redistest.NewServer(t, "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-auth-clients", "no")
	url := fmt.Sprintf("rediss://127.0.0.1:%d", port)

	r := cliRun(t, "run", "--redis", url+"?skip_verify=true", "tls-job", "--", "true")
	if r.code != 0 {
		t.Errorf("skip_verify=true: exit %d, stderr %q", r.code, r.stderr)
	}
	r = cliRun(t, "status", "--redis", url, "tls-job")
	if r.code != exitUnreachable || !strings.Contains(r.stderr, "certificate signed by unknown authority") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("unverifiable certificate: exit %d, stderr %q", r.code, r.stderr)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir and returns their paths.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "dlock test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
