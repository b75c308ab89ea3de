package pml_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pml "pml/clients/go"
)

// Incomplete or unreadable TLS options are refused by Dial, naming the option: a KeyFile
// without its CertFile, or a ServerName without TLS, dialled in plaintext, without a word.
func TestDialRefusesIncompleteOrUnreadableTLSOptions(t *testing.T) {
	dir := t.TempDir()
	unreadable := filepath.Join(dir, "ca-dir")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		opts pml.Options
		said string
	}{
		{pml.Options{KeyFile: notPEM}, "pml: Options.KeyFile given without Options.CertFile"},
		{pml.Options{CertFile: notPEM}, "pml: Options.CertFile given without Options.KeyFile"},
		{pml.Options{TLS: true, KeyFile: notPEM}, "pml: Options.KeyFile given without Options.CertFile"},
		{pml.Options{CAFile: missing}, "pml: Options.CAFile: open " + missing + ": no such file or directory"},
		{pml.Options{CAFile: notPEM}, "pml: Options.CAFile " + notPEM + " holds no PEM certificate"},
		{pml.Options{CAFile: unreadable}, "pml: Options.CAFile: read " + unreadable + ": is a directory"},
		{pml.Options{CertFile: missing, KeyFile: notPEM}, "pml: Options.CertFile, Options.KeyFile: open " + missing},
		// it dialled in plaintext, the name never checked
		{pml.Options{ServerName: "pml.example"}, "pml: Options.ServerName given without TLS: it names the host"},
	}
	for _, c := range cases {
		client, err := pml.Dial("127.0.0.1:1", c.opts)
		if err == nil {
			client.Close()
			t.Errorf("Dial(%+v) took the options", c.opts)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.said) {
			t.Errorf("Dial(%+v): %q, want it to start %q", c.opts, err, c.said)
		}
	}
}
