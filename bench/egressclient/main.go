// Command egressclient is BenchmarkEgress's client inside a container: it
// fetches a URL N times, each on a new connection (through $http_proxy
// when set, as the sandbox's programs do), and prints one line: the
// connection setup times' p50 and p99 in microseconds (dial to the first
// byte of the response), the bytes read and the seconds all fetches took. Static (CGO_ENABLED=0), so it
// runs in the busybox image.
//
//	egressclient -n 500 http://HOST:PORT/small
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"
)

func main() {
	n := flag.Int("n", 100, "fetches")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: egressclient [-n N] URL")
		os.Exit(2)
	}
	url := flag.Arg(0)
	var ds []time.Duration
	var total int64
	began := time.Now()
	for range *n {
		// A transport per fetch: a new connection every time, as the
		// figure is a connection's setup.
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}
		start := time.Now()
		resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "egressclient:", err)
			os.Exit(1)
		}
		ds = append(ds, time.Since(start))
		k, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fmt.Fprintln(os.Stderr, "egressclient: status", resp.Status)
			os.Exit(1)
		}
		total += k
		tr.CloseIdleConnections()
	}
	secs := time.Since(began).Seconds()
	slices.Sort(ds)
	q := func(p float64) int64 { return ds[min(len(ds)-1, int(p*float64(len(ds))))].Microseconds() }
	fmt.Printf("p50_us=%d p99_us=%d bytes=%d secs=%.6f\n", q(0.50), q(0.99), total, secs)
}
