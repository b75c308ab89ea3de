package pml_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pml "pml/clients/go"
	"pml/clients/go/pmlv1"
)

// A nil among the records is refused InvalidArgument naming it, before anything is sent (it
// panicked: a nil pointer dereference, setting its request id).
func TestUploadRefusesANilRecord(t *testing.T) {
	c, err := pml.Dial("127.0.0.1:1", pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	records := []*pmlv1.ExecutionRecord{pml.NewRecord("Read JSON file", "x", "typescript"), nil}
	_, err = c.Upload(context.Background(), records, pml.UploadOptions{})
	if status.Code(err) != codes.InvalidArgument ||
		status.Convert(err).Message() != "records[1] is nil, not an ExecutionRecord (nothing was sent)" {
		t.Fatalf("Upload with a nil record: %v", err)
	}
	// named in a BadRequest, as the server's and the Python client's refusals (it had none)
	if v := pml.FieldViolations(err); len(v) != 1 || v[0].Field != "records[1]" {
		t.Fatalf("Upload with a nil record: violations %v", v)
	}
}

// Nothing listens: each stream waits for the connection at most Options.Timeout, and Upload
// returns UNAVAILABLE naming the address once the reconnects run out, even under a context
// without a deadline (it waited forever).
func TestUploadToAServerThatIsDownGivesUpUnavailable(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := listener.Addr().String()
	listener.Close() // nothing listens there now
	c, err := pml.Dial(target, pml.Options{Timeout: 500 * time.Millisecond, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		records := []*pmlv1.ExecutionRecord{pml.NewRecord("Read JSON file", "x", "typescript")}
		report, err := c.Upload(context.Background(), records, pml.UploadOptions{MaxReconnects: 1})
		if err == nil {
			t.Errorf("Upload to nothing: %d acks, no error", len(report.Acks))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable ||
			!strings.HasPrefix(status.Convert(err).Message(), "pml: no connection to "+target+" within 500ms") {
			t.Fatalf("Upload to nothing: %v", err)
		}
	case <-time.After(60 * time.Second): // a guard against the hang, not a measure
		t.Fatal("Upload to a server that is down had not returned after 60 s")
	}
}

// An empty target is refused by Dial (it dialled, and every call failed UNAVAILABLE after its
// retries: "missing address").
func TestDialRefusesAnEmptyTarget(t *testing.T) {
	for _, target := range []string{"", "  "} {
		client, err := pml.Dial(target, pml.Options{})
		if err == nil {
			client.Close()
			t.Fatalf("Dial(%q) took it", target)
		}
		if err.Error() != `pml: Dial: the target is empty: give "host:port"` {
			t.Fatalf("Dial(%q): %v", target, err)
		}
	}
}

// A target that cannot be dialled is refused by Dial, naming it: each dialled, and every call
// failed UNAVAILABLE once its retry budget was spent, as of a server down ("produced zero
// addresses", "too many colons in address", "invalid port"); a newline read from a file said
// "net/url: invalid control character in URL". The whitespace around it is dropped.
func TestDialRefusesATargetThatCannotBeDialled(t *testing.T) {
	cases := map[string]string{
		" 127.0.0.1 :50051":      `pml: Dial: the target "127.0.0.1 :50051" holds a space or a control character: give "host:port"`,
		"http://127.0.0.1:50051": `pml: Dial: the target "http://127.0.0.1:50051" is a URL (TLS is Options.TLS): give "host:port"`,
		"127.0.0.1:99999":        `pml: Dial: the target "127.0.0.1:99999" has the port 99999: a port is 1 to 65535: give "host:port"`,
		"dns:///localhost:0":     `pml: Dial: the target "dns:///localhost:0" has the port 0: a port is 1 to 65535: give "host:port"`,
	}
	for target, said := range cases {
		client, err := pml.Dial(target, pml.Options{})
		if err == nil {
			client.Close()
			t.Errorf("Dial(%q) took it", target)
		} else if err.Error() != said {
			t.Errorf("Dial(%q): %v", target, err)
		}
	}
	server := startServer(t)
	client, err := pml.Dial(server+"\n", pml.Options{}) // as read from a file
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{}); err != nil {
		t.Fatalf("a target with a newline around it: %v", err)
	}
}

// TestDialRefusesAKeyThatCannotBeAHeader: a key with a newline (a key file's, around it, is
// dropped) or a non-ASCII character failed every call INTERNAL "header key "authorization"
// contains value with non-printable ASCII characters"; Dial refuses it naming the option,
// never echoing the key.
func TestDialRefusesAKeyThatCannotBeAHeader(t *testing.T) {
	for key, want := range map[string]string{
		"s3cr3t\nkey":             "pml: Options.APIKey holds U+000A at position 6: ",
		"s3cr3t\u00e9":            "pml: Options.APIKey holds U+00E9 at position 6: ",
		strings.Repeat("k", 2000): "pml: Options.APIKey is 2000 characters; a key is at most 1024",
	} {
		client, err := pml.Dial("127.0.0.1:1", pml.Options{APIKey: key})
		if err == nil {
			client.Close()
			t.Fatalf("%.12q: dialled", key)
		}
		if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("%.12q: %v", key, err)
		}
	}
	client, err := pml.Dial("127.0.0.1:1", pml.Options{APIKey: " s3cr3t\n"})
	if err != nil {
		t.Fatalf("a key with a newline around it: %v", err)
	}
	client.Close()
}

// TestUploadOnAClosedClientSendsNothing: Close twice is no error; Upload after Close waited Options.Timeout for a
// connection on each reconnect, then returned UNAVAILABLE "no connection ... (SHUTDOWN)". It
// returns at once, Canceled "pml: the client is closed", without a reconnect.
func TestUploadOnAClosedClientSendsNothing(t *testing.T) {
	target := startServer(t)
	client, err := pml.Dial(target, pml.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{}); err != nil {
		t.Fatal(err) // connected
	}
	for range 2 { // the second Close returned Canceled "the client connection is closing"
		if err := client.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	report, err := client.Upload(context.Background(),
		[]*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")}, pml.UploadOptions{MaxReconnects: 2})
	want := "pml: the client is closed (Close was called): nothing was sent"
	if status.Code(err) != codes.Canceled || status.Convert(err).Message() != want || report.Reconnects != 0 {
		t.Fatalf("Upload on a closed client: %v after %d reconnects", err, report.Reconnects)
	}
}

// TestDialRefusesANegativeTimeout: a negative Options.Timeout was taken as the default 30 s
// without a word (as the Python and Node clients refuse a timeout that is not above 0); zero
// is the default.
func TestDialRefusesANegativeTimeout(t *testing.T) {
	client, err := pml.Dial("127.0.0.1:1", pml.Options{Timeout: -time.Second})
	if err == nil {
		client.Close()
		t.Fatal("Dial took a timeout of -1s")
	}
	if err.Error() != "pml: Options.Timeout is -1s: a duration above 0 (0: the default, 30s)" {
		t.Fatalf("Dial with a timeout of -1s: %v", err)
	}
	client, err = pml.Dial("127.0.0.1:1", pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	client.Close()
}

// Backoff of a negative attempt is the first attempt's (it panicked: a negative shift count).
func TestBackoffOfANegativeAttemptIsTheFirsts(t *testing.T) {
	if wait := pml.Backoff(-1, 0); wait < 50*time.Millisecond || wait > 100*time.Millisecond {
		t.Fatalf("Backoff(-1, 0) = %v, want 50ms to 100ms as Backoff(0, 0)", wait)
	}
}
