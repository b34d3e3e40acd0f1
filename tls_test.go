package dlock

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestTLS runs a lock, a waiter and its wake-up over rediss:// against a
// redis-server with TLS on, with certificates made for the test.
func TestTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pool := writeTestCerts(t, dir)
	port := freeTestPort(t)
	srv := redistest.NewServer(t,
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", "no")
	_ = srv

	opt, err := redis.ParseURL("rediss://127.0.0.1:" + strconv.Itoa(port) + "/0")
	if err != nil {
		t.Fatal(err)
	}
	opt.TLSConfig.RootCAs = pool
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	holder := mustMutex(t, newClient(t, rdb), "tls")
	wc := newClient(t, rdb)
	waiter := mustMutex(t, wc, "tls")
	l := mustLock(t, ctx, holder)
	got := lockAndUnlock(ctx, waiter)
	waitForWaiter(t, wc, "tls")
	if err := holder.Unlock(l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken over TLS")
	}

	// Plain text to the TLS port fails rather than hangs.
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, ReadTimeout: time.Second, DialTimeout: time.Second})
	defer plain.Close()
	m := mustMutex(t, newClient(t, plain), "tls")
	if _, err := m.TryLock(ctx); err == nil {
		t.Fatal("plain-text client locked on the TLS port")
	} else {
		t.Log(err)
	}
}

// writeTestCerts writes a CA and a server certificate for 127.0.0.1 to dir
// and returns a pool that trusts the CA.
func writeTestCerts(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	for file, block := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: leafDER},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
