// The data-plane tests' workload: a server, and a client that sends requests to it without
// pause and counts every one (devcluster/linkerd_images.py builds it into an image).
//
//	testapp server [-listen :8080] [-drain 5s]
//	testapp client -target URL [-target URL2 ...] [-interval 50ms] [-timeout 2s] [-listen :9090]
//
// The server answers /hello with its pod's name and /ready with 200. On SIGTERM it answers
// /ready with 503, keeps serving for -drain (while its endpoint leaves every client's
// load balancer), then shuts down gracefully: a rolling restart drops nothing.
//
// The client GETs each -target in turn, one request every -interval, one at a time, each
// within -timeout; a failure is an error or a status other than 200. GET /counts on -listen says, as JSON, how
// many were sent, succeeded and failed, with the time and error of each failure (the first
// 1000) and of the first and last request. Each failure is also logged.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: testapp server|client [flags]")
	}
	switch os.Args[1] {
	case "server":
		server(os.Args[2:])
	case "client":
		client(os.Args[2:])
	default:
		log.Fatalf("unknown mode %q: want server or client", os.Args[1])
	}
}

func server(args []string) {
	flags := flag.NewFlagSet("server", flag.ExitOnError)
	listen := flags.String("listen", ":8080", "address to serve on")
	drain := flags.Duration("drain", 5*time.Second, "how long to keep serving after SIGTERM")
	_ = flags.Parse(args)
	name, _ := os.Hostname()
	var draining atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", name)
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		draining.Store(true)
		log.Printf("SIGTERM: serving for %s more, then shutting down", *drain)
		time.Sleep(*drain)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	log.Printf("serving on %s as %s", *listen, name)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
	log.Print("shut down")
}

type failure struct {
	Time   time.Time `json:"time"`
	Target string    `json:"target"`
	Error  string    `json:"error"`
}

type targets []string

func (t *targets) String() string     { return fmt.Sprint(*t) }
func (t *targets) Set(s string) error { *t = append(*t, s); return nil }

type counts struct {
	mu        sync.Mutex
	Targets   []string   `json:"targets"`
	Total     int64      `json:"total"`
	Succeeded int64      `json:"succeeded"`
	Failed    int64      `json:"failed"`
	First     *time.Time `json:"first"`
	Last      *time.Time `json:"last"`
	Failures  []failure  `json:"failures"`
}

func (c *counts) record(at time.Time, target string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Total++
	if c.First == nil {
		first := at
		c.First = &first
	}
	last := at
	c.Last = &last
	if err == nil {
		c.Succeeded++
		return
	}
	c.Failed++
	if len(c.Failures) < 1000 {
		c.Failures = append(c.Failures, failure{at, target, err.Error()})
	}
	log.Printf("request %d to %s failed: %v", c.Total, target, err)
}

func client(args []string) {
	flags := flag.NewFlagSet("client", flag.ExitOnError)
	var urls targets
	flags.Var(&urls, "target", "a URL to GET (repeat for more, taken in turn)")
	interval := flags.Duration("interval", 50*time.Millisecond, "time between requests")
	timeout := flags.Duration("timeout", 2*time.Second, "each request's deadline")
	listen := flags.String("listen", ":9090", "address of /counts")
	_ = flags.Parse(args)
	if len(urls) == 0 {
		log.Fatal("client: -target is required")
	}
	c := &counts{Targets: urls, Failures: []failure{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/counts", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	go func() { log.Fatal(http.ListenAndServe(*listen, mux)) }()
	httpClient := &http.Client{Timeout: *timeout}
	log.Printf("sending GET to %v in turn, every %s", urls, *interval)
	for i := 0; ; i++ {
		started := time.Now()
		target := urls[i%len(urls)]
		c.record(started, target, get(httpClient, target))
		if wait := *interval - time.Since(started); wait > 0 {
			time.Sleep(wait)
		}
	}
}

func get(httpClient *http.Client, url string) error {
	resp, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
