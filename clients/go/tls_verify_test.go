package pml_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pml "pml/clients/go"
	"pml/clients/go/pmlv1"
)

// writePEM writes one PEM block of kind to dir/name and returns its path.
func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T, dir, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key, file: writePEM(t, dir, name+".pem", "CERTIFICATE", der)}
}

// serverPair is a certificate for 127.0.0.1 signed by ca, and its key: the files' paths.
func (ca testCA) serverPair(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, "server.pem", "CERTIFICATE", der), writePEM(t, dir, "server.key", "PRIVATE KEY", keyDER)
}

// TestACertificateTheCADidNotSignIsNeverRetried: a server whose certificate Options.CAFile did
// not sign failed each call UNAVAILABLE ("authentication handshake failed: tls: failed to
// verify certificate ...") after MaxRetries more handshakes, and Upload reconnected
// MaxReconnects times, as if the server were down. A certificate failure is permanent: one
// attempt, and the error says it is the TLS certificate, naming Options.CAFile.
func TestACertificateTheCADidNotSignIsNeverRetried(t *testing.T) {
	dir := t.TempDir()
	signer, other := newTestCA(t, dir, "signer"), newTestCA(t, dir, "other")
	certFile, keyFile := signer.serverPair(t, dir)
	target := startServer(t, "--tls-cert", certFile, "--tls-key", keyFile)

	pool := x509.NewCertPool()
	pool.AddCert(other.cert)
	sent := 0
	counted := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		sent++
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
		grpc.WithChainUnaryInterceptor(pml.RetryInterceptor(0, pml.DefaultRetryBudget, 30*time.Second, nil), counted))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pmlv1.NewPmlServiceClient(conn).GetStats(context.Background(), &pmlv1.GetStatsRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "Options.CAFile") {
		t.Fatalf("GetStats with the wrong CA: %v", err)
	}
	if sent != 1 {
		t.Fatalf("a certificate failure was tried %d times, want 1", sent)
	}

	client, err := pml.Dial(target, pml.Options{CAFile: other.file, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{})
	if err == nil || !strings.Contains(err.Error(), "TLS") ||
		!strings.Contains(err.Error(), "Options.CAFile") {
		t.Fatalf("Stats with the wrong CA: %v", err)
	}
	report, err := client.Upload(context.Background(),
		[]*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")}, pml.UploadOptions{MaxReconnects: 3})
	if !strings.Contains(err.Error(), "Options.CAFile") || report.Reconnects != 0 {
		t.Fatalf("Upload with the wrong CA: %v after %d reconnects", err, report.Reconnects)
	}
	// said once: Upload's ask of the server's limits was said again, "pml: TLS: ... (pml: TLS: ...)"
	if n := strings.Count(err.Error(), "pml: TLS:"); n != 1 {
		t.Fatalf("Upload with the wrong CA said it %d times: %v", n, err)
	}
}

// TestTLSOnOneSideOnlyIsNeverRetried: a TLS client of a plaintext server failed UNAVAILABLE
// "tls: first record does not look like a TLS handshake", a plaintext client of a TLS server
// UNAVAILABLE "error reading server preface: EOF", as of a server down: each call was retried
// for its budget, and Upload waited Options.Timeout on each reconnect, then said only "no
// connection ... within". No retry cures either: one attempt, an error saying which side
// speaks TLS and naming the options, Upload's at once.
func TestTLSOnOneSideOnlyIsNeverRetried(t *testing.T) {
	dir := t.TempDir()
	signer := newTestCA(t, dir, "signer")
	certFile, keyFile := signer.serverPair(t, dir)
	cases := []struct {
		target string
		opts   pml.Options
		says   string
	}{
		{startServer(t), pml.Options{CAFile: signer.file},
			"pml: TLS: the server does not speak TLS (connection error: desc = \"transport: authentication " +
				"handshake failed: tls: first record does not look like a TLS handshake\"): it listens in " +
				"plaintext; leave Options.TLS, CAFile, CertFile and KeyFile unset"},
		{startServer(t, "--tls-cert", certFile, "--tls-key", keyFile), pml.Options{},
			"pml: TLS: the server speaks TLS and this client connected in plaintext (connection error: " +
				"desc = \"error reading server preface: EOF\"): set Options.TLS, or Options.CAFile"},
	}
	for _, c := range cases {
		c.opts.Timeout = 20 * time.Second
		client, err := pml.Dial(c.target, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		_, err = client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{})
		if status.Code(err) != codes.Unavailable || !strings.HasPrefix(status.Convert(err).Message(), c.says) {
			t.Errorf("Stats, TLS %v: %v", c.opts.CAFile != "", err)
		}
		report, err := client.Upload(context.Background(),
			[]*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")}, pml.UploadOptions{MaxReconnects: 3})
		if !strings.HasPrefix(status.Convert(err).Message(), c.says) || report.Reconnects != 0 {
			t.Errorf("Upload, TLS %v: %v after %d reconnects", c.opts.CAFile != "", err, report.Reconnects)
		}
	}
}

// TestAServerAskingForAClientCertificateIsNeverRetried: a server with --tls-client-ca closes
// the connection of a client without a certificate once the handshake is done: gRPC said only
// UNAVAILABLE "error reading server preface: EOF", as of a server gone, so each call was retried
// for its budget and Upload reconnected MaxReconnects times. The server asked for a certificate
// in the handshake: the error says so at once, naming Options.CertFile and Options.KeyFile.
func TestAServerAskingForAClientCertificateIsNeverRetried(t *testing.T) {
	dir := t.TempDir()
	signer := newTestCA(t, dir, "signer")
	certFile, keyFile := signer.serverPair(t, dir)
	target := startServer(t, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", signer.file)
	client, err := pml.Dial(target, pml.Options{CAFile: signer.file, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{})
	if status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "it asks for a client certificate") ||
		!strings.Contains(err.Error(), "Options.CertFile and Options.KeyFile") {
		t.Fatalf("Stats without a client certificate: %v", err)
	}
	report, err := client.Upload(context.Background(),
		[]*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")}, pml.UploadOptions{MaxReconnects: 3})
	if err == nil || !strings.Contains(err.Error(), "Options.CertFile") || report.Reconnects != 0 {
		t.Fatalf("Upload without a client certificate: %v after %d reconnects", err, report.Reconnects)
	}
}

// silentTLSServer listens on loopback: it closes each plaintext connection at once (gRPC
// then says UNAVAILABLE "error reading server preface: EOF", as of a server that speaks TLS
// to a plaintext client) and never answers a TLS ClientHello, holding that connection until
// the test ends; helloes says when the client sent one.
func silentTLSServer(t *testing.T) (target string, helloes <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hello := make(chan struct{}, 16)
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				first := make([]byte, 1)
				if _, err := io.ReadFull(conn, first); err != nil || first[0] != 0x16 { // 0x16: a TLS handshake record
					_ = conn.Close()
					return
				}
				mu.Lock()
				held = append(held, conn)
				mu.Unlock()
				select {
				case hello <- struct{}{}:
				default:
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range held {
			_ = conn.Close()
		}
	})
	return ln.Addr().String(), hello
}

// TestTheTLSProbeEndsWithTheCallersContext: a plaintext client whose call fails as against a
// server that speaks TLS asks the server in a TLS handshake of its own (tlsRefusal); against
// a server that never answers it, that handshake took up to 5 s whatever the call's context,
// and the call then failed UNAVAILABLE. It ends with the caller's context: the call and the
// upload return its error (DEADLINE_EXCEEDED; the upload the context's own error).
func TestTheTLSProbeEndsWithTheCallersContext(t *testing.T) {
	target, helloes := silentTLSServer(t)
	client, err := pml.Dial(target, pml.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = client.API().GetStats(ctx, &pmlv1.GetStatsRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("GetStats under a deadline the TLS probe outlasts: %v, want DeadlineExceeded", err)
	}
	select {
	case <-helloes: // the probe was made: the deadline ended it, not the call's own attempt
	default:
		t.Fatal("the client never asked the server in a TLS handshake")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = client.Upload(ctx, []*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")}, pml.UploadOptions{})
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Upload under a deadline the TLS probe outlasts: %v, want the deadline's error", err)
	}
}
