// Package pml is a small Go client for pml's gRPC API (proto/pml/v1; the generated code is in
// the pmlv1 package). It dials with an API key and TLS, records executions, uploads many over
// StreamTraces (resending every execution not acknowledged when a stream breaks) and asks for
// suggestions. Every other RPC is on API().
//
//	c, err := pml.Dial("127.0.0.1:50051", pml.Options{APIKey: os.Getenv("PML_API_KEY")})
//	res, err := c.Record(ctx, pml.NewRecord("Read JSON file", code, "typescript", pml.OK("read_file")))
//	reply, err := c.Suggest(ctx, &pmlv1.SuggestRequest{Intent: "Load JSON data"})
package pml

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"pml/clients/go/pmlv1"
)

// Options says how to reach the server. The zero value is a plaintext connection without a key
// (a single-tenant server on loopback).
type Options struct {
	// APIKey is sent as `authorization: Bearer <key>`; it decides the tenant and the role.
	APIKey string
	// TLS uses TLS with the system roots (or CAFile).
	TLS bool
	// CAFile is the PEM CA that signed the server certificate; implies TLS.
	CAFile string
	// CertFile and KeyFile are the client certificate and key for mutual TLS; imply TLS.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server certificate (without TLS: refused
	// by Dial).
	ServerName string
	// Timeout bounds each unary call whose context has no deadline, retries included (default
	// 30 s; negative: refused by Dial; docs/api.md, Deadlines and retries).
	Timeout time.Duration
	// RetryBudget is how long a unary call safe to repeat (a read, a record with a request id,
	// a dry-run retention) keeps retrying after its first failure on UNAVAILABLE, or
	// RESOURCE_EXHAUSTED with the server's google.rpc.RetryInfo (a quota; without it, a message
	// over the server's size limit, never sent again), waiting Backoff and at least that delay,
	// within the call's deadline (default DefaultRetryBudget, 5 s: longer than a server
	// restart; negative: refused by Dial; docs/api.md, Deadlines and retries).
	RetryBudget time.Duration
	// MaxRetries caps how often such a call is retried (default 0: no cap, RetryBudget and the
	// deadline bound them; negative: never).
	MaxRetries int
}

// DefaultRetryBudget is Options.RetryBudget when it is zero, as the Python client's
// retry_seconds and the Node client's retryBudgetMs (docs/api.md, Deadlines and retries).
const DefaultRetryBudget = 5 * time.Second

// reconnectBackoff replaces gRPC's backoff of a connection's reconnects (from 1 s by 1.6 up to
// 120 s), while which every call fails at once with the last connect error: a call retrying
// through a server restart kept failing for seconds after the server was back. The connection
// reconnects from 0.1 s, at least once a second (docs/api.md, Deadlines and retries).
var reconnectBackoff = backoff.Config{
	BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second,
}

// Client is a connection to one pml server. It is safe for concurrent use.
type Client struct {
	refused  func(context.Context, error) error // tlsRefusal of this connection
	conn     *grpc.ClientConn
	api      pmlv1.PmlServiceClient
	timeout  time.Duration
	closing  sync.Once
	closeErr error
}

// bearer puts the API key on every call. It allows plaintext because a single-tenant server on
// loopback is a supported setup; with keys, the server refuses a non-loopback listen without
// TLS unless told otherwise.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Dial connects to target ("host:port"; empty: an error). The connection is made lazily, on
// the first call.
func Dial(target string, opts Options) (*Client, error) {
	target = strings.TrimSpace(target) // a target read from a file keeps its newline
	if target == "" {
		// it dialled, and every call failed UNAVAILABLE after its retries ("missing address")
		return nil, errors.New(`pml: Dial: the target is empty: give "host:port"`)
	}
	if problem := targetProblem(target); problem != "" {
		return nil, fmt.Errorf(`pml: Dial: the target %q %s: give "host:port"`, target, problem)
	}
	if opts.Timeout < 0 { // it was taken as the default without a word
		return nil, fmt.Errorf("pml: Options.Timeout is %v: a duration above 0 (0: the default, 30s)", opts.Timeout)
	}
	key, err := headerKey(opts.APIKey)
	if err != nil {
		return nil, err
	}
	asked := new(atomic.Bool) // the server asked for a client certificate none was given for
	creds, err := transportCredentials(opts, asked)
	if err != nil {
		return nil, err
	}
	plainTarget := "" // a plaintext client's target: a server that speaks TLS is asked about
	if creds.Info().SecurityProtocol == "insecure" {
		plainTarget = target
	}
	refused := func(ctx context.Context, err error) error { return tlsRefusal(ctx, err, asked, plainTarget) }
	if opts.RetryBudget < 0 {
		return nil, fmt.Errorf("pml: Options.RetryBudget is %v: a duration from 0 (0: the default, %v)",
			opts.RetryBudget, DefaultRetryBudget)
	}
	budget := opts.RetryBudget
	if budget == 0 {
		budget = DefaultRetryBudget
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: 20 * time.Second}),
		grpc.WithChainUnaryInterceptor(retryInterceptor(opts.MaxRetries, budget, timeout, refused)),
	}
	if key != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearer(key)))
	}
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("pml: dial %s: %w", target, err)
	}
	return &Client{refused: refused, conn: conn, api: pmlv1.NewPmlServiceClient(conn), timeout: timeout}, nil
}

// targetProblem says why target cannot be dialled, "" when it may be: a space or a control
// character inside it, a URL's scheme, a port out of range. Each dialled, and every call failed
// UNAVAILABLE once its retry budget was spent ("produced zero addresses", "too many colons in
// address", "invalid port"), as of a server down (clients/go/README.md).
func targetProblem(target string) string {
	if strings.ContainsFunc(target, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "holds a space or a control character"
	}
	if lower := strings.ToLower(target); strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") {
		return "is a URL (TLS is Options.TLS)"
	}
	if _, port, err := net.SplitHostPort(strings.TrimPrefix(target, "dns:///")); err == nil {
		if n, err := strconv.Atoi(port); err == nil && (n < 1 || n > 65535) {
			return fmt.Sprintf("has the port %d: a port is 1 to 65535", n)
		}
	}
	return ""
}

// maxKeyChars bounds an API key: `pml keys add` prints 47 characters, and past gRPC's 8 KiB of
// metadata every call would fail on the header, not on the key.
const maxKeyChars = 1024

// headerKey is the API key as it can travel in the `authorization` header: without the
// whitespace around it (a key read from a file keeps its newline), printable ASCII, at most
// maxKeyChars. Any other character failed every call INTERNAL "header key "authorization"
// contains value with non-printable ASCII characters"; Dial refuses it naming Options.APIKey,
// never echoing the key (a secret), as the Python and Node clients do.
func headerKey(apiKey string) (string, error) {
	key := strings.TrimSpace(apiKey)
	for i, r := range []rune(key) {
		if r < ' ' || r > '~' {
			return "", fmt.Errorf("pml: Options.APIKey holds %U at position %d: "+
				"a key is printable ASCII (as `pml keys add` prints it)", r, i)
		}
	}
	if n := len(key); n > maxKeyChars {
		return "", fmt.Errorf("pml: Options.APIKey is %d characters; a key is at most %d "+
			"(`pml keys add` prints 47)", n, maxKeyChars)
	}
	return key, nil
}

// transportCredentials refuses, naming the option, what would fail later or quietly: a
// KeyFile without its CertFile, or a ServerName without TLS, dialled in plaintext, a CertFile
// without its KeyFile said "open : no such file or directory" (clients/go/README.md, TLS
// options).
//
// Without a client certificate, a server that asks for one is noted in asked (tlsRefusal).
func transportCredentials(opts Options, asked *atomic.Bool) (credentials.TransportCredentials, error) {
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		given, missing := "CertFile", "KeyFile"
		if opts.CertFile == "" {
			given, missing = missing, given
		}
		return nil, fmt.Errorf("pml: Options.%s given without Options.%s: "+
			"mutual TLS needs the client certificate and its key", given, missing)
	}
	if !opts.TLS && opts.CAFile == "" && opts.CertFile == "" {
		if opts.ServerName != "" { // it dialled in plaintext, the name never checked
			return nil, errors.New("pml: Options.ServerName given without TLS: it names the host the " +
				"server's certificate must hold; set Options.TLS (or Options.CAFile)")
		}
		return insecure.NewCredentials(), nil
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: opts.ServerName}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("pml: Options.CAFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("pml: Options.CAFile %s holds no PEM certificate", opts.CAFile)
		}
		config.RootCAs = pool
	}
	if opts.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("pml: Options.CertFile, Options.KeyFile: %w", err)
		}
		config.Certificates = []tls.Certificate{cert}
	} else {
		config.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
			return &tls.Certificate{}, nil // none is sent
		}
	}
	return credentials.NewTLS(config), nil
}

// Close closes the connection; once more it does nothing (it returned gRPC's Canceled "the
// client connection is closing", as if a call had failed).
func (c *Client) Close() error {
	c.closing.Do(func() { c.closeErr = c.conn.Close() })
	return c.closeErr
}

// open is nil, or once Close was called Canceled "pml: the client is closed" (gRPC's code for
// a call on a closed connection): Upload on a closed client waited Options.Timeout for a
// connection on each of its reconnects, then said UNAVAILABLE "no connection ... (SHUTDOWN)".
func (c *Client) open() error {
	if c.conn.GetState() == connectivity.Shutdown {
		return status.Error(codes.Canceled, "pml: the client is closed (Close was called): nothing was sent")
	}
	return nil
}

// API is the generated stub, for the RPCs the wrapper does not cover.
func (c *Client) API() pmlv1.PmlServiceClient { return c.api }

// askLimitBytes: a Record this big asks the server's message limit first (as the Python
// client's record).
const askLimitBytes = 64 * 1024

// Record captures one execution. A rejected capture is not an error: look at the outcome and
// the tool failures of the result. A record over the server's message limit is not sent:
// ResourceExhausted with a BadRequest naming `record`, its size and the limit, as Upload
// answers for it and as the Python client's record (gRPC said only "Received message larger
// than max", the record sent whole); the limit is asked only for a record over askLimitBytes.
func (c *Client) Record(ctx context.Context, record *pmlv1.ExecutionRecord) (*pmlv1.CaptureResult, error) {
	request := &pmlv1.RecordExecutionRequest{Record: record}
	if size := proto.Size(request); size > askLimitBytes {
		if _, has := ctx.Deadline(); !has { // the timeout bounds the ask and the record together
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.timeout)
			defer cancel()
		}
		limit, err := c.maxMessageBytes(ctx)
		if err != nil {
			return nil, err
		}
		if limit > 0 && size > limit {
			return nil, status.ErrorProto(tooBig(record.GetRequestId(), size, limit).GetError())
		}
	}
	reply, err := c.api.RecordExecution(ctx, request)
	if err != nil {
		return nil, err
	}
	return reply.GetResult(), nil
}

// Suggest ranks the capabilities that fit request.Intent.
func (c *Client) Suggest(ctx context.Context, request *pmlv1.SuggestRequest) (*pmlv1.SuggestResponse, error) {
	return c.api.Suggest(ctx, request)
}

// UploadOptions tunes Upload.
type UploadOptions struct {
	// MaxReconnects is how many new streams Upload opens, after a broken one or to resend what
	// the server acknowledged with an error that waiting may cure (default 5; negative: none).
	MaxReconnects int
	// OnAck, if set, sees every acknowledgement as it arrives.
	OnAck func(*pmlv1.StreamTracesResponse)
}

// UploadReport is what Upload achieved: one acknowledgement per execution id (a result or the
// error that refused that execution alone), and how often it reconnected.
type UploadReport struct {
	Acks       map[string]*pmlv1.StreamTracesResponse
	Reconnects int
}

// Upload sends whole records over StreamTraces. When the stream breaks (UNAVAILABLE, CANCELLED,
// DEADLINE_EXCEEDED, or RESOURCE_EXHAUSTED with RetryInfo: a quota, the server's stream limit)
// it opens a new one and resends every record not yet acknowledged, or acknowledged with an
// error that waiting may cure (UNAVAILABLE, as while the server's index catches up after a
// start, or RESOURCE_EXHAUSTED with RetryInfo: not captured), after Backoff and never before
// the server's RetryInfo delay (on the stream's error or those acknowledgements); once the
// reconnects run out, that error is the record's acknowledgement. Request ids (a random UUID for a record without one, kept
// across reconnects) make each apply exactly once. The records' request ids are filled in
// place; two records under one request id, or a nil record, are refused (InvalidArgument,
// nothing sent). Each stream waits for the connection at most Options.Timeout.
func (c *Client) Upload(ctx context.Context, records []*pmlv1.ExecutionRecord, opts UploadOptions) (*UploadReport, error) {
	maxReconnects := opts.MaxReconnects
	if maxReconnects == 0 {
		maxReconnects = 5
	}
	for i, r := range records {
		if r == nil { // it panicked, setting the request id of nil
			return nil, refusedField(FieldViolation{fmt.Sprintf("records[%d]", i), "is nil, not an ExecutionRecord"})
		}
	}
	for i, r := range records {
		if bad := notUTF8(r.ProtoReflect(), fmt.Sprintf("records[%d]", i)); bad != nil {
			return nil, refusedField(*bad)
		}
	}
	for _, r := range records {
		if r.GetRequestId() == "" {
			r.RequestId = NewRequestID()
		}
	}
	// Acknowledgements are keyed by request id: two records under one id would share one
	// answer, and the second could go unsent behind the first's. Nothing is sent then.
	first := make(map[string]int, len(records))
	for i, r := range records {
		if j, repeated := first[r.GetRequestId()]; repeated {
			return nil, refusedField(FieldViolation{fmt.Sprintf("records[%d].request_id", i),
				fmt.Sprintf("%q repeats records[%d]'s: give each record its own request id", r.GetRequestId(), j)})
		}
		first[r.GetRequestId()] = i
	}
	report := &UploadReport{Acks: make(map[string]*pmlv1.StreamTracesResponse, len(records))}
	if err := c.open(); err != nil {
		return report, err
	}
	// A record whose message is over the server's limit would end the whole stream in
	// RESOURCE_EXHAUSTED: it is answered here, alone, and never sent.
	limit, err := c.maxMessageBytes(ctx)
	if err != nil {
		return report, err
	}
	if limit > 0 {
		for _, r := range records {
			msg := &pmlv1.StreamTracesRequest{
				ExecutionId: r.GetRequestId(),
				Sequence:    uint64(len(records)),
				Event:       &pmlv1.StreamTracesRequest_Record{Record: r},
			}
			if size := proto.Size(msg); size > limit {
				ack := tooBig(r.GetRequestId(), size, limit)
				report.Acks[r.GetRequestId()] = ack
				if opts.OnAck != nil {
					opts.OnAck(ack)
				}
			}
		}
	}
	var sequence uint64
	var last error
	// Records the server acknowledged with an error that waiting may cure, by request id: not
	// captured, so they are sent again; each one's error answers it if the reconnects run out.
	resend := make(map[string]*pmlv1.StreamTracesResponse)
	for attempt := 0; ; attempt++ {
		var todo []*pmlv1.ExecutionRecord
		held := 0
		for _, r := range records {
			if _, done := report.Acks[r.GetRequestId()]; !done {
				todo = append(todo, r)
				if _, ok := resend[r.GetRequestId()]; ok {
					held++
				}
			}
		}
		if len(todo) == 0 {
			return report, nil
		}
		if attempt > 0 {
			if last != nil && !retryable(last) {
				return report, last
			}
			if report.Reconnects >= maxReconnects {
				if last == nil && held == len(todo) { // their errors answer them
					for _, r := range todo {
						ack := resend[r.GetRequestId()]
						report.Acks[r.GetRequestId()] = ack
						if opts.OnAck != nil {
							opts.OnAck(ack)
						}
					}
					return report, nil
				}
				if last == nil {
					last = fmt.Errorf("pml: the stream ended with %d executions unacknowledged", len(todo))
				}
				return report, last
			}
			if last != nil || held > 0 { // not before the server's RetryInfo delay
				delay, _ := RetryDelay(last)
				for _, ack := range resend {
					if d, ok := RetryDelay(status.ErrorProto(ack.GetError())); ok {
						delay = max(delay, d)
					}
				}
				timer := time.NewTimer(Backoff(report.Reconnects, delay))
				select {
				case <-ctx.Done():
					timer.Stop()
					return report, ctx.Err()
				case <-timer.C:
				}
			}
			report.Reconnects++
		}
		if err := c.open(); err != nil { // closed during the upload: not one more stream
			return report, err
		}
		last = c.streamOnce(ctx, todo, &sequence, report, resend, opts.OnAck)
		if refused := c.refused(ctx, last); refused != nil {
			return report, refused
		}
	}
}

// concurrencyRefusal is grpcio's refusal of a call over the server's --max-concurrent-rpcs,
// made before any handler runs, so without RetryInfo: a busy server, not a size limit
// (docs/api.md, Deadlines and retries). Nothing of the call was done.
const concurrencyRefusal = "Concurrent RPC limit exceeded!"

// worthResending says whether a unary call refused, or an execution acknowledged, with this
// error was refused for a while only: UNAVAILABLE, or RESOURCE_EXHAUSTED with the server's
// RetryInfo (a quota) or grpcio's concurrencyRefusal (without either, a size limit that the
// same message meets again).
func worthResending(refusal *status.Status) bool {
	switch refusal.Code() {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		_, ok := RetryDelay(refusal.Err())
		return ok || refusal.Message() == concurrencyRefusal
	}
	return false
}

// maxMessageBytes is the server's largest request message (GetServerInfo), 0 when it does not
// say (an older server) or cannot be asked (Upload then meets the same error); an error only
// when that cannot change (tlsRefusal: the streams would meet it MaxReconnects times).
func (c *Client) maxMessageBytes(ctx context.Context) (int, error) {
	// Asked once: the upload's streams' reconnects are its retries (a retry budget spent on
	// this ask made an upload to a server that is gone wait seconds before its first stream).
	info, err := c.api.GetServerInfo(context.WithValue(ctx, onceKey{}, true), &pmlv1.GetServerInfoRequest{})
	if refused := c.refused(ctx, err); refused != nil {
		return 0, refused
	}
	if err != nil {
		return 0, nil
	}
	return int(info.GetMaxMessageBytes()), nil
}

func tooBig(executionID string, size, limit int) *pmlv1.StreamTracesResponse {
	refusal := status.New(codes.ResourceExhausted, fmt.Sprintf(
		"not sent: the record is %d bytes as a message, over the server's --max-message-bytes of %d",
		size, limit))
	if detailed, err := refusal.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field:       "record",
			Description: fmt.Sprintf("%d bytes as a message, over the server's limit of %d", size, limit),
		}},
	}); err == nil {
		refusal = detailed
	}
	return &pmlv1.StreamTracesResponse{
		ExecutionId: executionID,
		Outcome:     &pmlv1.StreamTracesResponse_Error{Error: refusal.Proto()},
	}
}

// safeToRepeat says whether a unary call may be sent again after a refusal: reads, a record
// whose request id makes a resend apply once, a retention dry run. Deletes and an applied
// retention are not (a resend after a lost reply would not answer as the first did).
func safeToRepeat(method string, request any) bool {
	switch method {
	case pmlv1.PmlService_GetServerInfo_FullMethodName, pmlv1.PmlService_Suggest_FullMethodName,
		pmlv1.PmlService_GetPattern_FullMethodName, pmlv1.PmlService_ListPatterns_FullMethodName,
		pmlv1.PmlService_ListPatternIntents_FullMethodName,
		pmlv1.PmlService_GetCapability_FullMethodName, pmlv1.PmlService_ListCapabilities_FullMethodName,
		pmlv1.PmlService_ListFailures_FullMethodName, pmlv1.PmlService_GetStats_FullMethodName:
		return true
	case pmlv1.PmlService_RecordExecution_FullMethodName:
		r, ok := request.(*pmlv1.RecordExecutionRequest)
		return ok && r.GetRecord().GetRequestId() != ""
	case pmlv1.PmlService_RunRetention_FullMethodName:
		r, ok := request.(*pmlv1.RunRetentionRequest)
		return ok && !r.GetApply()
	}
	return false
}

// Backoff is how long to wait before retry attempt (0 first): 0.1 s doubling up to 2 s, with
// full jitter on its upper half, and never less than the server's RetryInfo delay.
func Backoff(attempt int, serverDelay time.Duration) time.Duration {
	ceiling := 100 * time.Millisecond << min(max(attempt, 0), 6) // a negative shift panicked
	if ceiling > 2*time.Second {
		ceiling = 2 * time.Second
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	jitter := time.Duration(uint64(b[0])|uint64(b[1])<<8|uint64(b[2])<<16) % (ceiling/2 + 1)
	return max(ceiling/2+jitter, serverDelay)
}

// retryWait is how long to wait before retry attempt at now, false when no retry is to be
// made: Backoff cut to end at retryUntil (the budget's end: the last retry is made then), never
// less than the server's RetryInfo delay; false once the budget is spent, or when the wait would
// end past it or at the call's deadline (docs/api.md, Deadlines and retries).
func retryWait(attempt int, serverDelay time.Duration, now, retryUntil, deadline time.Time) (time.Duration, bool) {
	if !now.Before(retryUntil) {
		return 0, false
	}
	wait := max(min(Backoff(attempt, 0), retryUntil.Sub(now)), serverDelay)
	if end := now.Add(wait); end.After(retryUntil) || !end.Before(deadline) {
		return 0, false
	}
	return wait, true
}

// onceKey marks the context of a call of this package's own that is made once, never retried.
type onceKey struct{}

// retryInterceptor retries as Options say; refused (nil: certificateFailure) says which
// errors no retry cures, under the call's context.
func retryInterceptor(maxRetries int, budget, timeout time.Duration, refused func(context.Context, error) error) grpc.UnaryClientInterceptor {
	if refused == nil {
		refused = func(_ context.Context, err error) error { return certificateFailure(err) }
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		// The timeout bounds the whole call, retries included, API()'s calls too (they had
		// none under a context without a deadline): docs/api.md, Deadlines and retries.
		if _, has := ctx.Deadline(); !has {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if m, ok := req.(proto.Message); ok {
			if bad := notUTF8(m.ProtoReflect(), ""); bad != nil {
				return refusedField(*bad)
			}
		}
		var retryUntil time.Time // the budget's end, from the first failure
		for attempt := 0; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if refused := refused(ctx, err); refused != nil {
				return refused // no retry cures it
			}
			// RESOURCE_EXHAUSTED without RetryInfo is the message size limit: no wait cures it.
			if err == nil || maxRetries < 0 || (maxRetries > 0 && attempt >= maxRetries) || ctx.Value(onceKey{}) != nil ||
				!safeToRepeat(method, req) || !worthResending(status.Convert(err)) {
				return err
			}
			now := time.Now()
			if retryUntil.IsZero() {
				retryUntil = now.Add(budget)
			}
			delay, _ := RetryDelay(err)
			deadline, _ := ctx.Deadline()
			wait, ok := retryWait(attempt, delay, now, retryUntil, deadline)
			if !ok {
				return err // the budget is spent, or the wait would outlast it or the call
			}
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return err
			case <-timer.C:
			}
		}
	}
}

// closedWords are gRPC's for a connection the server closed just after the handshake: before
// its HTTP/2 preface, or under the client's first write.
var closedWords = []string{"error reading server preface", "broken pipe", "connection reset by peer"}

// tlsRefusal is err said again when no retry cures it: certificateFailure, or a server that
// asked for a client certificate (asked) and then closed the connection: it refuses a client
// without one once the handshake is done, without a TLS alert, so gRPC says only UNAVAILABLE
// "error reading server preface: EOF", as of a server gone, and each call was retried for its
// budget. It names Options.CertFile and Options.KeyFile (docs/api.md, Deadlines and retries).
// A plaintext client (plainTarget, its target; "" with TLS) meets a server that speaks TLS the
// same way, "error reading server preface: EOF", each call retried for its budget and Upload
// waiting Options.Timeout on each reconnect: a TLS handshake of the client's own (speaksTLS)
// tells, and the error names Options.TLS and Options.CAFile. That handshake is made under ctx,
// the call's: when ctx ends first, its error is the answer (a server that never answered the
// handshake held the call up to speaksTLSWithin past its deadline, docs/api.md, Deadlines and
// retries).
func tlsRefusal(ctx context.Context, err error, asked *atomic.Bool, plainTarget string) error {
	if refused := certificateFailure(err); refused != nil {
		return refused
	}
	refusal, ok := status.FromError(err)
	if err == nil || !ok || refusal.Code() != codes.Unavailable ||
		!slices.ContainsFunc(closedWords, func(w string) bool { return strings.Contains(refusal.Message(), w) }) {
		return nil
	}
	if asked.Load() {
		return status.Errorf(codes.Unavailable, tlsSaid+"the server refused the handshake: it asks "+
			"for a client certificate (mutual TLS) and none was given (%s): set Options.CertFile and "+
			"Options.KeyFile, a certificate its client CA signed; not retried", refusal.Message())
	}
	if plainTarget == "" {
		return nil
	}
	speaks, ended := speaksTLS(ctx, plainTarget)
	if ended != nil {
		return status.FromContextError(ended).Err()
	}
	if speaks {
		return status.Errorf(codes.Unavailable, tlsSaid+"the server speaks TLS and this client "+
			"connected in plaintext (%s): set Options.TLS, or Options.CAFile (the PEM of the CA that "+
			"signed its certificate); not retried", refusal.Message())
	}
	return nil
}

// tlsSaid begins this package's words for a TLS failure no retry cures: an error that begins
// so is said already (Upload's ask of the server's limits went through the retry interceptor).
const tlsSaid = "pml: TLS: "

// speaksTLSWithin bounds speaksTLS's handshake, within the caller's context.
const speaksTLSWithin = 5 * time.Second

// speaksTLS says whether the server at target completes a TLS handshake, its certificate not
// checked (nothing is sent over it), made under ctx and for at most speaksTLSWithin; ended is
// ctx's error when ctx ended before the answer (then speaks says nothing).
func speaksTLS(ctx context.Context, target string) (speaks bool, ended error) {
	dialer := &tls.Dialer{
		Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}, //nolint:gosec // only asks whether it speaks TLS
	}
	within, cancel := context.WithTimeout(ctx, speaksTLSWithin)
	defer cancel()
	conn, err := dialer.DialContext(within, "tcp", strings.TrimPrefix(target, "dns:///"))
	if err != nil {
		return false, ctx.Err()
	}
	_ = conn.Close()
	return true, nil
}

// certificateFailure is err said again when it is a failure to verify the server's TLS
// certificate (a CA that did not sign it, a name it does not hold, an expired one), nil
// otherwise. gRPC says UNAVAILABLE, as of a server down: each unary call was tried MaxRetries
// more times and Upload reconnected until its reconnects ran out, never saying why. No wait
// cures it: it is never retried, and names the option (docs/api.md, Deadlines and retries).
//
// A TLS client whose server speaks plaintext is said so too: gRPC's "tls: first record does
// not look like a TLS handshake" was retried as a server down, and Upload said only "no
// connection". An error said already (tlsSaid) is returned as it is: it was said twice over.
func certificateFailure(err error) error {
	refusal, ok := status.FromError(err)
	if err == nil || !ok || refusal.Code() != codes.Unavailable {
		return nil
	}
	if strings.HasPrefix(refusal.Message(), tlsSaid) {
		return err
	}
	if strings.Contains(refusal.Message(), "tls: first record does not look like a TLS handshake") {
		return status.Errorf(codes.Unavailable, tlsSaid+"the server does not speak TLS (%s): it "+
			"listens in plaintext; leave Options.TLS, CAFile, CertFile and KeyFile unset (or start it "+
			"with --tls-cert and --tls-key); not retried", refusal.Message())
	}
	if !strings.Contains(refusal.Message(), "tls: failed to verify certificate") {
		return nil
	}
	return status.Errorf(codes.Unavailable, tlsSaid+"the server's certificate was not verified "+
		"(%s): Options.CAFile must be the PEM of the CA that signed it (without it, the system's "+
		"roots are used), and the certificate must hold the target's host (or Options.ServerName); "+
		"not retried", refusal.Message())
}

// retryable says whether a broken stream is opened again: cut (CANCELLED, DEADLINE_EXCEEDED),
// or refused for a while only (worthResending: a server starting or draining, a quota).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return worthResending(status.Convert(err))
}

// streamOnce runs one stream: a goroutine sends while this one reads acknowledgements, so a
// server that stops reading until acks are consumed (its stream window) never deadlocks us.
func (c *Client) streamOnce(
	ctx context.Context,
	todo []*pmlv1.ExecutionRecord,
	sequence *uint64,
	report *UploadReport,
	resend map[string]*pmlv1.StreamTracesResponse,
	onAck func(*pmlv1.StreamTracesResponse),
) error {
	if err := c.connected(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady: after a broken connection, the new stream waits for the reconnect
	// (bounded by ctx) instead of failing at once and using up the reconnects.
	stream, err := c.api.StreamTraces(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	// Executions sent on this stream and not answered: once the server has said nothing for
	// Timeout while one waits (a frozen server, a dead connection: Upload waited for ever under
	// a ctx without a deadline), the stream is cancelled as broken (docs/api.md, Deadlines and
	// retries).
	waiting := len(todo)
	var silent atomic.Bool
	silence := time.AfterFunc(c.timeout, func() {
		silent.Store(true)
		cancel()
	})
	defer silence.Stop()
	first := *sequence + 1
	*sequence += uint64(len(todo))
	sent := make(chan error, 1)
	go func() {
		for i, r := range todo {
			msg := &pmlv1.StreamTracesRequest{
				ExecutionId: r.GetRequestId(),
				Sequence:    first + uint64(i),
				Event:       &pmlv1.StreamTracesRequest_Record{Record: r},
			}
			if err := stream.Send(msg); err != nil {
				// io.EOF: the stream ended; Recv reports why.
				sent <- nil
				return
			}
		}
		sent <- stream.CloseSend()
	}()
	for {
		ack, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return <-sent
		}
		if err != nil {
			if silent.Load() && ctx.Err() != nil {
				return status.Errorf(codes.DeadlineExceeded,
					"pml: no answer from the server within %v (%d executions waiting)", c.timeout, waiting)
			}
			return err
		}
		silence.Stop()
		if waiting--; waiting > 0 {
			silence.Reset(c.timeout)
		}
		id := ack.GetExecutionId()
		if _, done := report.Acks[id]; !done && ack.GetError() != nil &&
			worthResending(status.FromProto(ack.GetError())) {
			resend[id] = ack
			continue
		}
		delete(resend, id)
		report.Acks[id] = ack
		if onAck != nil {
			onAck(ack)
		}
	}
}

// connected waits for the connection at most the client's Timeout: a stream that waits for it
// (WaitForReady) is bounded by ctx alone, so an Upload to a server that is down, given a ctx
// without a deadline, never returned (clients/go/README.md). UNAVAILABLE when it is not made:
// a broken stream, which Upload opens again until its reconnects run out.
func (c *Client) connected(ctx context.Context) error {
	wait, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	c.conn.Connect()
	for {
		state := c.conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if !c.conn.WaitForStateChange(wait, state) {
			if err := ctx.Err(); err != nil {
				return err
			}
			return status.Errorf(codes.Unavailable, "pml: no connection to %s within %v (%s)",
				c.conn.Target(), c.timeout, state)
		}
	}
}

// Call is one tool call of a record: OK(tool) or Failed(tool, error).
type Call = *pmlv1.ToolCall

// OK is a tool call that succeeded; argumentsJSON is optional (one JSON object).
func OK(tool string, argumentsJSON ...string) Call {
	call := &pmlv1.ToolCall{Tool: tool, Ok: true}
	if len(argumentsJSON) > 0 {
		call.ArgumentsJson = argumentsJSON[0]
	}
	return call
}

// Failed is a tool call that failed with message.
func Failed(tool, message string) Call {
	return &pmlv1.ToolCall{Tool: tool, Ok: false, Error: message}
}

// NewRecord is an execution record with a fresh request id (keep the record to retry it
// idempotently).
func NewRecord(intent, code, language string, calls ...Call) *pmlv1.ExecutionRecord {
	return &pmlv1.ExecutionRecord{
		RequestId: NewRequestID(),
		Intent:    intent,
		Code:      code,
		Language:  language,
		ToolCalls: calls,
	}
}

// NewRequestID is a random (version 4) UUID.
func NewRequestID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// FieldViolation is one bad field of a refused request.
type FieldViolation struct{ Field, Description string }

// notUTF8 is the first string field of m (at path, the request's field path as the server
// names one: "record.tool_calls[0].tool") that is not UTF-8, nil when there is none. protobuf-go
// refuses such a string when it marshals: the call failed INTERNAL "grpc: error while marshaling:
// string field contains invalid UTF-8", naming no field, and an Upload's stream broke on it,
// INTERNAL too (clients/go/README.md).
func notUTF8(m protoreflect.Message, path string) *FieldViolation {
	var found *FieldViolation
	at := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	check := func(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string) bool {
		switch {
		case fd.Kind() == protoreflect.StringKind:
			if text := v.String(); !utf8.ValidString(text) {
				found = &FieldViolation{name, invalidText(text)}
			}
		case fd.Message() != nil:
			found = notUTF8(v.Message(), name)
		}
		return found == nil
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := at(string(fd.Name()))
		switch {
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				if !check(fd, list.Get(i), fmt.Sprintf("%s[%d]", name, i)) {
					return false
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, item protoreflect.Value) bool {
				if key := k.String(); !utf8.ValidString(key) {
					found = &FieldViolation{name, "a key " + invalidText(key)}
					return false
				}
				return check(fd.MapValue(), item, fmt.Sprintf("%s[%q]", name, k.String()))
			})
		default:
			check(fd, v, name)
		}
		return found == nil
	})
	return found
}

// invalidText says where text stops being UTF-8.
func invalidText(text string) string {
	at := 0
	for at < len(text) {
		r, size := utf8.DecodeRuneInString(text[at:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		at += size
	}
	return fmt.Sprintf("holds the byte %#02x at byte %d, which is not UTF-8 text (protobuf strings are UTF-8)", text[at], at)
}

// refusedField is a request refused before it is sent, as the server refuses a bad field:
// InvalidArgument with a BadRequest naming it (FieldViolations), as the Python client's.
func refusedField(bad FieldViolation) error {
	refusal := status.New(codes.InvalidArgument, fmt.Sprintf("%s %s (nothing was sent)", bad.Field, bad.Description))
	detailed, err := refusal.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: bad.Field, Description: bad.Description}},
	})
	if err != nil {
		return refusal.Err()
	}
	return detailed.Err()
}

// FieldViolations are the google.rpc.BadRequest details of an INVALID_ARGUMENT error: every bad
// field, by path ("record.tool_calls[2].tool").
func FieldViolations(err error) []FieldViolation {
	var out []FieldViolation
	for _, detail := range status.Convert(err).Details() {
		if bad, ok := detail.(*errdetails.BadRequest); ok {
			for _, v := range bad.GetFieldViolations() {
				out = append(out, FieldViolation{v.GetField(), v.GetDescription()})
			}
		}
	}
	return out
}

// RetryDelay is the server's google.rpc.RetryInfo delay (a quota, a server starting or
// draining), and whether it gave one.
func RetryDelay(err error) (time.Duration, bool) {
	for _, detail := range status.Convert(err).Details() {
		if info, ok := detail.(*errdetails.RetryInfo); ok {
			return info.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
