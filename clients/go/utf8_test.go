package pml_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pml "pml/clients/go"
	"pml/clients/go/pmlv1"
)

// A string that is not UTF-8 (bytes from a file name, a command line) in any request field is
// refused InvalidArgument with a BadRequest naming the field, nothing sent, as the Python client
// refuses a str that is not Unicode text. protobuf-go refused it at marshal: INTERNAL "grpc:
// error while marshaling: string field contains invalid UTF-8", naming no field; an Upload's
// stream broke on it, INTERNAL too.
func TestAStringThatIsNotUTF8IsRefusedNamingItsField(t *testing.T) {
	target := startServer(t)
	c, err := pml.Dial(target, pml.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	calls := map[string]func() error{
		"record.intent": func() error {
			_, err := c.Record(ctx, pml.NewRecord("read \xff", "x", "typescript", pml.OK("read_file")))
			return err
		},
		"record.tool_calls[1].error": func() error {
			_, err := c.Record(ctx, pml.NewRecord("Read JSON", "x", "typescript",
				pml.OK("read_file"), pml.Failed("parse_json", "bad \xc3")))
			return err
		},
		"available_tools.tools[1]": func() error {
			_, err := c.Suggest(ctx, &pmlv1.SuggestRequest{
				Intent: "x", AvailableTools: &pmlv1.AvailableTools{Tools: []string{"a", "b\xff"}},
			})
			return err
		},
		"name": func() error { // API()'s calls too
			_, err := c.API().GetPattern(ctx, &pmlv1.GetPatternRequest{Name: "patterns/\xfe"})
			return err
		},
		"records[1].intent": func() error {
			records := []*pmlv1.ExecutionRecord{
				pml.NewRecord("Read JSON a", "x", "typescript", pml.OK("read_file")),
				pml.NewRecord("read \xff", "y", "typescript", pml.OK("read_file")),
			}
			report, err := c.Upload(ctx, records, pml.UploadOptions{MaxReconnects: 1})
			if report != nil && len(report.Acks) > 0 {
				t.Errorf("Upload refused with %d acknowledgements", len(report.Acks))
			}
			return err
		},
	}
	for field, call := range calls {
		err := call()
		violations := pml.FieldViolations(err)
		if status.Code(err) != codes.InvalidArgument || len(violations) != 1 || violations[0].Field != field {
			t.Errorf("%s: %v, violations %v", field, err, violations)
			continue
		}
		if !slices.Contains([]string{
			"holds the byte 0xff at byte 5, which is not UTF-8 text (protobuf strings are UTF-8)",
			"holds the byte 0xc3 at byte 4, which is not UTF-8 text (protobuf strings are UTF-8)",
			"holds the byte 0xff at byte 1, which is not UTF-8 text (protobuf strings are UTF-8)",
			"holds the byte 0xfe at byte 9, which is not UTF-8 text (protobuf strings are UTF-8)",
		}, violations[0].Description) {
			t.Errorf("%s: said %q", field, violations[0].Description)
		}
		if want := field + " " + violations[0].Description + " (nothing was sent)"; status.Convert(err).Message() != want {
			t.Errorf("%s: message %q", field, status.Convert(err).Message())
		}
	}
	stats, err := c.API().GetStats(ctx, &pmlv1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.GetExecutions() != 0 {
		t.Errorf("%d executions captured: nothing was to be sent", stats.GetExecutions())
	}
}
