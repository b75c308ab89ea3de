package pml_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pml "pml/clients/go"
	"pml/clients/go/pmlv1"
)

// pmlCommand is the `pml` of the repository's .venv (make install), or $PML_BIN.
func pmlCommand(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("PML_BIN"); bin != "" {
		return bin
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "pml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no pml server to test against: %s is missing (run `make install`, or set PML_BIN)", bin)
	}
	return bin
}

var listening = regexp.MustCompile(`\(port (\d+)\)`)

// startServer runs a real `pml serve` on a free loopback port with its data in a temporary
// directory and waits until its health says SERVING. It is stopped with SIGTERM at cleanup.
func startServer(t *testing.T, extra ...string) string {
	t.Helper()
	target, _ := startServerProcess(t, extra...)
	return target
}

// startServerProcess is startServer, with the server's process.
func startServerProcess(t *testing.T, extra ...string) (string, *os.Process) {
	t.Helper()
	args := append([]string{
		"serve", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--embedder", "hashing", "--log-level", "warning", "--grace-seconds", "2",
	}, extra...)
	cmd := exec.Command(pmlCommand(t), args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	ports := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if m := listening.FindStringSubmatch(scanner.Text()); m != nil {
				ports <- m[1]
			}
		}
		close(ports)
	}()
	var port string
	select {
	case p, ok := <-ports:
		if !ok {
			t.Fatal("pml serve exited before listening")
		}
		port = p
	case <-time.After(60 * time.Second):
		t.Fatal("pml serve did not start within 60 s")
	}
	target := "127.0.0.1:" + port
	creds := insecure.NewCredentials()
	if slices.Contains(extra, "--tls-cert") { // its health, whoever signed its certificate
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a test's own server
	}
	if !slices.Contains(extra, "--tls-client-ca") { // its health needs a client certificate
		waitServing(t, target, creds)
	}
	return target, cmd.Process
}

func waitServing(t *testing.T, target string, creds credentials.TransportCredentials) {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := grpc_health_v1.NewHealthClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		reply, err := health.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "pml.v1.PmlService"})
		cancel()
		if err == nil && reply.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never became SERVING", target)
}

// addKey makes a keys file with one key of role for tenant, through `pml keys add`.
func addKey(t *testing.T, keysFile, tenant, role string) string {
	t.Helper()
	out, err := exec.Command(pmlCommand(t), "keys", "add", "--keys-file", keysFile,
		"--tenant", tenant, "--role", role).Output()
	if err != nil {
		t.Fatalf("pml keys add: %v", err)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	return lines[len(lines)-1]
}

const readCode = `const d = await mcp.read_file({path: "FILE"}); return await mcp.parse_json(d)`

func readRecord(intent, file string) *pmlv1.ExecutionRecord {
	return pml.NewRecord(intent, strings.ReplaceAll(readCode, "FILE", file), "typescript",
		pml.OK("read_file", fmt.Sprintf(`{"path": %q}`, file)), pml.OK("parse_json"))
}

func TestRecordStreamAndSuggestWithAnAPIKey(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	key := addKey(t, keys, "acme", "write")
	target := startServer(t, "--keys-file", keys)
	ctx := context.Background()

	anonymous, err := pml.Dial(target, pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer anonymous.Close()
	_, err = anonymous.Record(ctx, readRecord("Read JSON file", "a.json"))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a call without a key: got %v, want UNAUTHENTICATED", err)
	}

	client, err := pml.Dial(target, pml.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var outcomes []pmlv1.CaptureOutcome
	for _, r := range []*pmlv1.ExecutionRecord{
		readRecord("Read JSON file", "a.json"), readRecord("Parse JSON from disk", "b.json"),
	} {
		res, err := client.Record(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		outcomes = append(outcomes, res.GetOutcome())
	}
	report, err := client.Upload(ctx, []*pmlv1.ExecutionRecord{readRecord("Load JSON data", "c.json")}, pml.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Acks) != 1 {
		t.Fatalf("acks: %v", report.Acks)
	}
	for _, ack := range report.Acks {
		outcomes = append(outcomes, ack.GetResult().GetOutcome())
	}
	want := []pmlv1.CaptureOutcome{
		pmlv1.CaptureOutcome_CAPTURE_OUTCOME_SAVED,
		pmlv1.CaptureOutcome_CAPTURE_OUTCOME_COUNTED,
		pmlv1.CaptureOutcome_CAPTURE_OUTCOME_COUNTED,
	}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}

	reply, err := client.Suggest(ctx, &pmlv1.SuggestRequest{Intent: "Load JSON data", PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.GetSuggestions()) == 0 {
		t.Fatal("no suggestion")
	}
	best := reply.GetSuggestions()[0]
	if got := strings.Join(best.GetPattern().GetToolsUsed(), ","); got != "read_file,parse_json" {
		t.Fatalf("best tools %q", got)
	}
	if best.GetPattern().GetUsageCount() != 3 || best.GetScore().GetTotal() <= 0 {
		t.Fatalf("best: usage %d, total %f", best.GetPattern().GetUsageCount(), best.GetScore().GetTotal())
	}

	_, err = client.Suggest(ctx, &pmlv1.SuggestRequest{Intent: ""})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty intent: %v", err)
	}
	violations := pml.FieldViolations(err)
	if len(violations) == 0 || violations[0].Field != "intent" {
		t.Fatalf("violations %v, want the intent named", violations)
	}
}

// Sessions (docs/ranking.md, Sessions): a record's SessionId teaches which capability follows
// which; a Suggest's Context without an intent answers what usually comes next.
func TestASessionTeachesWhatUsuallyComesNext(t *testing.T) {
	target := startServer(t)
	ctx := context.Background()
	client, err := pml.Dial(target, pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, session := range []string{"conversation-1", "conversation-2"} {
		list := pml.NewRecord("List the folder", "await mcp.list_dir({path: '.'})", "typescript", pml.OK("list_dir"))
		read := readRecord("Read JSON file", "a.json")
		for _, r := range []*pmlv1.ExecutionRecord{list, read} {
			r.SessionId = session
			if _, err := client.Record(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	reply, err := client.Suggest(ctx, &pmlv1.SuggestRequest{
		Context: &pmlv1.SuggestContext{PreviousTools: []string{"list_dir"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.GetSuggestions()) != 1 {
		t.Fatalf("suggestions %v, want the read step alone", reply.GetSuggestions())
	}
	next := reply.GetSuggestions()[0]
	if got := strings.Join(next.GetPattern().GetToolsUsed(), ","); got != "read_file,parse_json" {
		t.Fatalf("next tools %q", got)
	}
	if next.GetScore().GetTransition() <= 0 {
		t.Fatalf("transition %f", next.GetScore().GetTransition())
	}
}

func TestRecordReportsARejectionWithItsToolFailures(t *testing.T) {
	client, err := pml.Dial(startServer(t), pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	res, err := client.Record(context.Background(), pml.NewRecord("Mail the boss",
		"await mcp.gmail_send({})", "typescript", pml.Failed("gmail_send", "not connected")))
	if err != nil {
		t.Fatal(err)
	}
	if res.GetOutcome() != pmlv1.CaptureOutcome_CAPTURE_OUTCOME_REJECTED {
		t.Fatalf("outcome %v", res.GetOutcome())
	}
	if f := res.GetToolFailures(); len(f) != 1 || f[0].GetTool() != "gmail_send" || f[0].GetError() != "not connected" {
		t.Fatalf("tool failures %v", f)
	}
}

// cutter forwards TCP connections to a server and can break every one of them at once, the
// way a network failure breaks a stream in the middle.
type cutter struct {
	listener net.Listener
	mu       sync.Mutex
	conns    []net.Conn
}

func newCutter(t *testing.T, upstream string) *cutter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{listener: l}
	t.Cleanup(func() { l.Close(); c.cut() })
	go func() {
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, down, up)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(up, down); up.Close() }()
			go func() { _, _ = io.Copy(down, up); down.Close() }()
		}
	}()
	return c
}

func (c *cutter) addr() string { return c.listener.Addr().String() }

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

func TestUploadResendsWhatWasNotAcknowledgedAfterABrokenStream(t *testing.T) {
	target := startServer(t)
	proxy := newCutter(t, target)
	client, err := pml.Dial(proxy.addr(), pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const n = 300
	records := make([]*pmlv1.ExecutionRecord, n)
	for i := range records {
		tool := fmt.Sprintf("tool_%d", i%4)
		records[i] = pml.NewRecord(fmt.Sprintf("task %d", i), fmt.Sprintf("await mcp.%s(x)", tool),
			"typescript", pml.OK(tool))
	}
	var once sync.Once
	acked := 0
	report, err := client.Upload(context.Background(), records, pml.UploadOptions{
		OnAck: func(*pmlv1.StreamTracesResponse) {
			acked++
			if acked == 10 {
				once.Do(proxy.cut)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if report.Reconnects < 1 {
		t.Fatalf("the cut broke no stream (reconnects %d)", report.Reconnects)
	}
	if len(report.Acks) != n {
		t.Fatalf("%d acks for %d records", len(report.Acks), n)
	}
	for id, ack := range report.Acks {
		if ack.GetResult() == nil {
			t.Fatalf("%s refused: %v", id, ack.GetError())
		}
	}
	t.Logf("%d reconnects", report.Reconnects)
	// Exactly once: the resent records the server had already applied come back replayed.
	stats, err := client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.GetExecutions() != n || stats.GetPatterns() != 4 {
		t.Fatalf("executions %d (want %d), patterns %d (want 4)", stats.GetExecutions(), n, stats.GetPatterns())
	}
}

func TestUploadRefusesAloneARecordOverTheServersMessageLimit(t *testing.T) {
	client, err := pml.Dial(startServer(t, "--max-message-bytes", "65536"), pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	huge := pml.NewRecord("huge", "await mcp.h()", "javascript",
		pml.OK("h", `{"x": "`+strings.Repeat("a", 70000)+`"}`))
	records := []*pmlv1.ExecutionRecord{
		readRecord("Read JSON file", "a.json"), huge, readRecord("Load JSON data", "b.json"),
	}
	report, err := client.Upload(context.Background(), records, pml.UploadOptions{})
	if err != nil {
		t.Fatalf("one oversized record failed the upload: %v", err)
	}
	refused := report.Acks[huge.GetRequestId()].GetError()
	if codes.Code(refused.GetCode()) != codes.ResourceExhausted ||
		!strings.Contains(refused.GetMessage(), "--max-message-bytes of 65536") {
		t.Fatalf("oversized record answered %v", refused)
	}
	for _, r := range []*pmlv1.ExecutionRecord{records[0], records[2]} {
		if report.Acks[r.GetRequestId()].GetResult() == nil {
			t.Fatalf("record %s not captured: %v", r.GetRequestId(), report.Acks[r.GetRequestId()])
		}
	}
	if report.Reconnects != 0 {
		t.Fatalf("%d reconnects", report.Reconnects)
	}
}

func TestUploadRefusesTwoRecordsUnderOneRequestID(t *testing.T) {
	client, err := pml.Dial(startServer(t), pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	a, b := readRecord("Read JSON file", "a.json"), readRecord("Load JSON data", "b.json")
	b.RequestId = a.GetRequestId()
	_, err = client.Upload(context.Background(), []*pmlv1.ExecutionRecord{a, b}, pml.UploadOptions{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "records[1].request_id") {
		t.Fatalf("a repeated request id: %v", err)
	}
	if v := pml.FieldViolations(err); len(v) != 1 || v[0].Field != "records[1].request_id" {
		t.Fatalf("a repeated request id: violations %v", v)
	}
	stats, err := client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.GetExecutions() != 0 {
		t.Fatalf("%d executions captured: nothing should have been sent", stats.GetExecutions())
	}
}

// TestUploadResendsWhatTheServerAcknowledgedAsUnavailable needs a server that acknowledges
// its first batch UNAVAILABLE (its index still catching up after a start): no flag of `pml
// serve` makes one, so tests/api/test_go.py starts it and passes its address in
// $PML_REFUSING_FIRST_BATCH. Those executions were not captured: they are sent again.
func TestUploadResendsWhatTheServerAcknowledgedAsUnavailable(t *testing.T) {
	target := os.Getenv("PML_REFUSING_FIRST_BATCH")
	if target == "" {
		t.Skip("run by tests/api/test_go.py, which starts a server refusing its first batch")
	}
	client, err := pml.Dial(target, pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var records []*pmlv1.ExecutionRecord
	for i := 0; i < 20; i++ {
		tool := fmt.Sprintf("tool%d", i%3)
		records = append(records, pml.NewRecord(fmt.Sprintf("task %d", i),
			fmt.Sprintf("await mcp.%s({n: %d})", tool, i), "typescript", pml.OK(tool)))
	}
	report, err := client.Upload(context.Background(), records, pml.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if report.Reconnects < 1 {
		t.Fatalf("no stream after the first: %d reconnects", report.Reconnects)
	}
	for i, r := range records {
		if ack := report.Acks[r.GetRequestId()]; ack == nil || ack.GetError() != nil {
			t.Fatalf("records[%d] not captured: %v", i, ack)
		}
	}
	stats, err := client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.GetExecutions() != 20 {
		t.Fatalf("%d executions captured, want 20", stats.GetExecutions())
	}
}

// TestUploadOutOfReconnectsAnswersWithTheServersError needs a server whose index never catches
// up, in $PML_NEVER_READY (started by tests/api/test_go.py): each execution is sent again until
// the reconnects run out, then its acknowledgement is the server's error, never dropped.
func TestUploadOutOfReconnectsAnswersWithTheServersError(t *testing.T) {
	target := os.Getenv("PML_NEVER_READY")
	if target == "" {
		t.Skip("run by tests/api/test_go.py, which starts a server that is never ready")
	}
	client, err := pml.Dial(target, pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	records := []*pmlv1.ExecutionRecord{
		readRecord("Read JSON file", "a.json"), readRecord("Load JSON data", "b.json"),
	}
	report, err := client.Upload(context.Background(), records, pml.UploadOptions{MaxReconnects: 1})
	if err != nil {
		t.Fatal(err)
	}
	if report.Reconnects != 1 {
		t.Fatalf("%d reconnects, want the 1 allowed", report.Reconnects)
	}
	for i, r := range records {
		refusal := status.FromProto(report.Acks[r.GetRequestId()].GetError())
		if refusal.Code() != codes.Unavailable || !strings.Contains(refusal.Message(), "catching up") {
			t.Fatalf("records[%d]: want the server's UNAVAILABLE, got %v", i, refusal)
		}
	}
}

func TestUploadGivesUpOnAnErrorThatWaitingCannotFix(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	key := addKey(t, keys, "acme", "read")
	client, err := pml.Dial(startServer(t, "--keys-file", keys), pml.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	report, err := client.Upload(context.Background(),
		[]*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")}, pml.UploadOptions{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a read key uploading: %v", err)
	}
	if report.Reconnects != 0 || errors.Is(err, io.EOF) {
		t.Fatalf("retried a permanent error: %d reconnects", report.Reconnects)
	}
}

// rateLimited is a server whose tenant may make one call a second (RESOURCE_EXHAUSTED with a
// RetryInfo of 1 s past it), and a write key of that tenant.
func rateLimited(t *testing.T) (string, string) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	key := addKey(t, keys, "acme", "write")
	return startServer(t, "--keys-file", keys, "--tenant-rate", "1", "--tenant-burst", "1"), key
}

func TestSafeCallsRetryThroughARateQuota(t *testing.T) {
	target, key := rateLimited(t)
	client, err := pml.Dial(target, pml.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	for i := 0; i < 3; i++ { // each past the first waits for the quota's RetryInfo
		if _, err := client.API().GetStats(ctx, &pmlv1.GetStatsRequest{}); err != nil {
			t.Fatalf("stats %d: %v", i, err)
		}
	}
	res, err := client.Record(ctx, readRecord("Read JSON file", "a.json"))
	if err != nil || res.GetPattern() == "" {
		t.Fatalf("record with a request id, retried: %v %v", res, err)
	}
	// A delete is not safe to repeat: refused once, it is not sent again.
	_, err = client.API().DeletePattern(ctx, &pmlv1.DeletePatternRequest{Name: "patterns/none"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a refused delete was retried: %v", err)
	}
}

func TestWithoutRetriesTheRefusalCarriesTheDelay(t *testing.T) {
	target, key := rateLimited(t)
	client, err := pml.Dial(target, pml.Options{APIKey: key, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	if _, err := client.API().GetStats(ctx, &pmlv1.GetStatsRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = client.API().GetStats(ctx, &pmlv1.GetStatsRequest{})
	delay, ok := pml.RetryDelay(err)
	if status.Code(err) != codes.ResourceExhausted || !ok || delay != time.Second {
		t.Fatalf("want RESOURCE_EXHAUSTED with RetryInfo 1s, got %v (%v, %v)", err, delay, ok)
	}
	if wait := pml.Backoff(0, delay); wait < delay {
		t.Fatalf("backoff %v shorter than the server's delay %v", wait, delay)
	}
}

// TestARetryWhoseWaitOutlastsTheTimeoutIsNotMade: the quota's RetryInfo says 1 s, the timeout
// is 500 ms. API()'s calls had no timeout under a context without a deadline, and the retry
// waited the second and succeeded; now Options.Timeout bounds them, retries included, and the
// refusal is the answer at once, with its delay (docs/api.md, Deadlines and retries).
func TestARetryWhoseWaitOutlastsTheTimeoutIsNotMade(t *testing.T) {
	target, key := rateLimited(t)
	client, err := pml.Dial(target, pml.Options{APIKey: key, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	if _, err := client.API().GetStats(ctx, &pmlv1.GetStatsRequest{}); err != nil {
		t.Fatal(err) // the one token
	}
	_, err = client.API().GetStats(ctx, &pmlv1.GetStatsRequest{})
	delay, ok := pml.RetryDelay(err)
	if status.Code(err) != codes.ResourceExhausted || !ok || delay != time.Second {
		t.Fatalf("want RESOURCE_EXHAUSTED with RetryInfo 1s at once, got %v", err)
	}
}

// TestAMessageOverTheSizeLimitIsNotSentAgain: RESOURCE_EXHAUSTED without RetryInfo is the
// server's --max-message-bytes, which no wait cures; the same record was sent MaxRetries more
// times at full size. A quota's refusal (with RetryInfo) is still retried.
func TestAMessageOverTheSizeLimitIsNotSentAgain(t *testing.T) {
	target := startServer(t, "--max-message-bytes", "65536")
	sent := 0
	counted := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		sent++
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(pml.RetryInterceptor(0, pml.DefaultRetryBudget, 30*time.Second, nil), counted))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	huge := pml.NewRecord("huge", "await mcp.h()", "javascript",
		pml.OK("h", `{"x": "`+strings.Repeat("a", 100000)+`"}`))
	_, err = pmlv1.NewPmlServiceClient(conn).RecordExecution(context.Background(),
		&pmlv1.RecordExecutionRequest{Record: huge})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a record over the limit: %v", err)
	}
	if _, ok := pml.RetryDelay(err); ok {
		t.Fatalf("the size limit's refusal carries RetryInfo: %v", err)
	}
	if sent != 1 {
		t.Fatalf("the record over the limit was sent %d times, want 1", sent)
	}
}

// TestRecordDoesNotSendARecordOverTheServersLimit: Record sent the record whole, and the
// server's gRPC refused it "Received message larger than max", naming no field. It asks the
// server's limit and refuses ResourceExhausted naming `record`, nothing sent, as Upload answers
// for such a record and as the Python client's record.
func TestRecordDoesNotSendARecordOverTheServersLimit(t *testing.T) {
	target := startServer(t, "--max-message-bytes", "65536")
	c, err := pml.Dial(target, pml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	huge := pml.NewRecord("huge", "await mcp.h()", "javascript",
		pml.OK("h", `{"x": "`+strings.Repeat("a", 100000)+`"}`))
	_, err = c.Record(context.Background(), huge)
	violations := pml.FieldViolations(err)
	if status.Code(err) != codes.ResourceExhausted || len(violations) != 1 || violations[0].Field != "record" ||
		!strings.HasSuffix(status.Convert(err).Message(), "bytes as a message, over the server's --max-message-bytes of 65536") {
		t.Fatalf("Record over the limit: %v %v", err, violations)
	}
	stats, err := c.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{})
	if err != nil || stats.GetExecutions() != 0 {
		t.Fatalf("stats %v, %v: nothing was to be sent", stats, err)
	}
	if _, err := c.Record(context.Background(), pml.NewRecord("small", "await mcp.h()", "javascript", pml.OK("h"))); err != nil {
		t.Fatalf("a record under the limit: %v", err)
	}
}

// TestACallRefusedByTheConcurrencyLimitIsRetried: grpcio refuses a call over
// --max-concurrent-rpcs RESOURCE_EXHAUSTED "Concurrent RPC limit exceeded!" before any handler,
// without RetryInfo, which was taken for a size limit and never retried: many calls at once
// lost those over the limit. Two streams hold both slots for the first attempt and end before
// the second, which is answered.
func TestACallRefusedByTheConcurrencyLimitIsRetried(t *testing.T) {
	target := startServer(t, "--max-concurrent-rpcs", "2")
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var holders []pmlv1.PmlService_StreamTracesClient
	for i := range 2 {
		stream, err := pmlv1.NewPmlServiceClient(conn).StreamTraces(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("s%d", i)
		hold := pml.NewRecord("hold "+name, "await mcp.hold_"+name+"()", "typescript", pml.OK("hold"))
		if err := stream.Send(&pmlv1.StreamTracesRequest{ExecutionId: name, Sequence: 1,
			Event: &pmlv1.StreamTracesRequest_Record{Record: hold}}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil { // acknowledged: the call holds its slot
			t.Fatal(err)
		}
		holders = append(holders, stream)
	}
	attempts := 0
	releaseOnSecond := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if attempts++; attempts == 2 {
			for _, stream := range holders {
				_ = stream.CloseSend()
				for _, err := stream.Recv(); err == nil; _, err = stream.Recv() {
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	retrying, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(pml.RetryInterceptor(0, pml.DefaultRetryBudget, 30*time.Second, nil), releaseOnSecond))
	if err != nil {
		t.Fatal(err)
	}
	defer retrying.Close()
	reply, err := pmlv1.NewPmlServiceClient(retrying).RecordExecution(context.Background(),
		&pmlv1.RecordExecutionRequest{Record: readRecord("Read JSON file", "a.json")})
	if err != nil || attempts != 2 {
		t.Fatalf("a record refused by the concurrency limit: %v after %d attempts", err, attempts)
	}
	if reply.GetResult().GetOutcome() != pmlv1.CaptureOutcome_CAPTURE_OUTCOME_SAVED {
		t.Fatalf("not captured: %v", reply)
	}
}

// TestUploadWaitsOutAQuotaThatRefusedItsStream: a stream refused RESOURCE_EXHAUSTED with
// RetryInfo (the tenant's call rate, here one a second, spent on GetServerInfo) is opened again
// once that delay has passed, as the Python client does: Upload gave up at once, or (had it
// reconnected without waiting) spent its reconnects on the same refusal. One reconnect does it.
func TestUploadWaitsOutAQuotaThatRefusedItsStream(t *testing.T) {
	target, key := rateLimited(t)
	client, err := pml.Dial(target, pml.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	records := []*pmlv1.ExecutionRecord{
		readRecord("Read JSON file", "a.json"), readRecord("Load JSON data", "b.json"),
	}
	report, err := client.Upload(context.Background(), records, pml.UploadOptions{})
	if err != nil {
		t.Fatalf("an upload through a quota: %v", err)
	}
	if report.Reconnects != 1 {
		t.Fatalf("%d reconnects, want 1 (the refused stream, opened again after its RetryInfo)", report.Reconnects)
	}
	for i, r := range records {
		if ack := report.Acks[r.GetRequestId()]; ack == nil || ack.GetResult() == nil {
			t.Fatalf("records[%d] not captured: %v", i, ack)
		}
	}
}

// TestUploadToAServerThatStoppedAnsweringGivesUp: a server frozen (SIGSTOP) once connected left
// Upload waiting for ever under a ctx without a deadline (a stream has none). Each stream the
// server leaves unanswered for Options.Timeout is cancelled as broken; out of reconnects,
// Upload returns DEADLINE_EXCEEDED saying so (docs/api.md, Deadlines and retries).
func TestUploadToAServerThatStoppedAnsweringGivesUp(t *testing.T) {
	target, server := startServerProcess(t)
	client, err := pml.Dial(target, pml.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.API().GetStats(context.Background(), &pmlv1.GetStatsRequest{}); err != nil {
		t.Fatal(err) // connected
	}
	if err := server.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = server.Signal(syscall.SIGCONT) }() // the cleanup's SIGTERM needs it running
	done := make(chan error, 1)
	go func() {
		_, err := client.Upload(context.Background(), []*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")},
			pml.UploadOptions{MaxReconnects: 1})
		done <- err
	}()
	select {
	case err := <-done:
		want := "pml: no answer from the server within 1s (1 executions waiting)"
		if status.Code(err) != codes.DeadlineExceeded || status.Convert(err).Message() != want {
			t.Fatalf("Upload to a frozen server: %v", err)
		}
	case <-time.After(60 * time.Second): // a guard against the hang, not a measure
		t.Fatal("Upload to a frozen server had not returned after 60 s")
	}
}

// TestACallRetriesThroughAServerRestartAndCountsItsRecordOnce: a rolling upgrade, `pml serve`
// stopped and started again on the same port 1.5 s later. A record sent meanwhile was retried 3
// times over some 0.7 s and failed UNAVAILABLE; now a call safe to repeat retries for
// Options.RetryBudget (5 s by default, 30 s here: the restart is slower on a loaded machine) and
// the connection reconnects within a second of the server's return: the record is captured,
// once (docs/api.md, Deadlines and retries).
func TestACallRetriesThroughAServerRestartAndCountsItsRecordOnce(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	target, server := startServerProcess(t, "--data-dir", dataDir)
	client, err := pml.Dial(target, pml.Options{Timeout: time.Minute, RetryBudget: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	if _, err := client.API().GetStats(ctx, &pmlv1.GetStatsRequest{}); err != nil {
		t.Fatal(err) // connected
	}
	if err := server.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Wait(); err != nil {
		t.Fatal(err)
	}
	again := exec.Command(pmlCommand(t), "serve", "--listen", target, "--data-dir", dataDir,
		"--embedder", "hashing", "--log-level", "warning")
	again.Stderr = os.Stderr
	started := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		started <- again.Start()
	}()
	defer func() {
		if again.Process != nil {
			_ = again.Process.Signal(syscall.SIGTERM)
			_ = again.Wait()
		}
	}()
	record := readRecord("Read JSON file", "a.json")
	res, err := client.Record(ctx, record) // sent while the server is down
	if startErr := <-started; startErr != nil {
		t.Fatal(startErr)
	}
	if err != nil || res.GetPattern() == "" {
		t.Fatalf("a record sent across a restart: %v %v", res, err)
	}
	if res, err = client.Record(ctx, record); err != nil || !res.GetReplayed() {
		t.Fatalf("its resend: %v %v", res, err)
	}
	stats, err := client.API().GetStats(ctx, &pmlv1.GetStatsRequest{})
	if err != nil || stats.GetExecutions() != 1 {
		t.Fatalf("want the record counted once: %v %v", stats, err)
	}
}

// unavailable answers every call UNAVAILABLE, counting the limit asks (GetServerInfo).
type unavailable struct {
	pmlv1.UnimplementedPmlServiceServer
	mu    sync.Mutex
	asked int
}

func (u *unavailable) GetServerInfo(context.Context, *pmlv1.GetServerInfoRequest) (*pmlv1.GetServerInfoResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.asked++
	return nil, status.Error(codes.Unavailable, "down for maintenance")
}

func (u *unavailable) StreamTraces(pmlv1.PmlService_StreamTracesServer) error {
	return status.Error(codes.Unavailable, "down for maintenance")
}

// TestAnUploadAsksTheServersLimitsOnce: Upload asks the server its largest message
// (GetServerInfo) before its first stream; that ask was retried for a whole retry budget, so
// an upload to a server answering UNAVAILABLE waited the budget before its first stream. The
// streams' reconnects are the upload's retries: the ask is made once (docs/api.md, Deadlines
// and retries).
func TestAnUploadAsksTheServersLimitsOnce(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	down := &unavailable{}
	pmlv1.RegisterPmlServiceServer(server, down)
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()
	client, err := pml.Dial(listener.Addr().String(), pml.Options{RetryBudget: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.Upload(context.Background(), []*pmlv1.ExecutionRecord{readRecord("Read JSON file", "a.json")},
		pml.UploadOptions{MaxReconnects: -1})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("an upload to a server answering UNAVAILABLE: %v", err)
	}
	down.mu.Lock()
	defer down.mu.Unlock()
	if down.asked != 1 {
		t.Fatalf("the server's limits were asked %d times, want 1", down.asked)
	}
}
