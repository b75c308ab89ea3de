// Command pml-load drives pml servers for the cluster benchmark (benches/bench_cluster.py):
// callers goroutines, each bound to one target in turn, record or suggest for a fixed time, and
// one JSON line reports the calls, errors and latency percentiles. A Go caller costs a fraction
// of the CPU a Python gRPC caller does, so on a small machine the servers, not the load, are
// what is measured. The records and queries are those of benches/harness/cluster_load.py.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	pml "pml/clients/go"
	"pml/clients/go/pmlv1"
)

type report struct {
	Calls  int            `json:"calls"`
	Errors map[string]int `json:"errors"`
	P50Ms  float64        `json:"p50_ms"`
	P99Ms  float64        `json:"p99_ms"`
}

func record(w, i int, tag string, fresh bool) *pmlv1.ExecutionRecord {
	n := (w*7919 + i) % 200
	code := fmt.Sprintf(`const d = await mcp.tool_%d({path: "%s%d-%d.json"}); return d`, n, tag, w, i)
	intent := fmt.Sprintf("Read JSON file %d with tool %d", n%50, n)
	if fresh { // a new intent mapping (an op log entry) every capture
		intent += fmt.Sprintf(" from %s batch %d %d", tag, w, i)
	}
	rec := pml.NewRecord(intent, code, "typescript", pml.OK(fmt.Sprintf("tool_%d", n), "{}"))
	rec.RequestId = fmt.Sprintf("%s-%d-%d", tag, w, i)
	return rec
}

func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i].Microseconds()) / 1000
}

func main() {
	kind := flag.String("kind", "suggest", "capture or suggest")
	targets := flag.String("targets", "", "comma-separated host:port of the servers")
	callers := flag.Int("callers", 8, "concurrent callers")
	seconds := flag.Float64("seconds", 6, "how long to call")
	tag := flag.String("tag", "g", "request id prefix (fresh per run: no replays)")
	fresh := flag.Bool("fresh-intents", false, "capture: a new intent text every call")
	flag.Parse()
	if *kind != "capture" && *kind != "suggest" {
		fmt.Fprintln(os.Stderr, "pml-load: -kind must be capture or suggest")
		os.Exit(2)
	}
	list := strings.Split(*targets, ",")
	clients := make([]*pml.Client, len(list))
	for i, target := range list {
		c, err := pml.Dial(target, pml.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pml-load:", err)
			os.Exit(1)
		}
		defer c.Close()
		clients[i] = c
	}
	var mu sync.Mutex
	var latencies []time.Duration
	errors := map[string]int{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	for w := 0; w < *callers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			client := clients[w%len(clients)]
			var mine []time.Duration
			failed := map[string]int{}
			for i := 0; time.Now().Before(deadline); {
				began := time.Now()
				var err error
				if *kind == "capture" {
					_, err = client.Record(context.Background(), record(w, i, *tag, *fresh))
				} else {
					intent := fmt.Sprintf("Read JSON file %d", (w*31+i)%50)
					_, err = client.Suggest(context.Background(), &pmlv1.SuggestRequest{Intent: intent})
				}
				if err != nil {
					failed[status.Code(err).String()]++
					continue
				}
				mine = append(mine, time.Since(began))
				i++
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			for code, count := range failed {
				errors[code] += count
			}
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	out := report{len(latencies), errors, percentile(latencies, 0.5), percentile(latencies, 0.99)}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
