// Package dockerproxy is a fault-injecting proxy for the Docker engine API.
// A node pointed at its unix socket (--docker-host unix://...) talks to the
// real engine through it, and a test or chaos run can hold, delay or fail
// the calls it chooses.
package dockerproxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Rule decides what happens to one request. The zero Rule forwards it.
type Rule struct {
	// Hold blocks the request until Release is called (or the client goes
	// away, in which case it is never forwarded).
	Hold bool
	// Delay forwards the request after this long.
	Delay time.Duration
	// Fail answers with this HTTP status instead of forwarding.
	Fail int
}

// Proxy forwards the Docker API from a unix socket to the engine.
type Proxy struct {
	mu       sync.Mutex
	rule     func(*http.Request) Rule
	released chan struct{}
	held     int
	heldCh   chan struct{}

	lis  net.Listener
	srv  *http.Server
	done chan struct{}
}

// Start serves on socketPath and forwards to the engine at upstream (a
// unix socket path such as /var/run/docker.sock).
func Start(socketPath, upstream string) (*Proxy, error) {
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, err
	}
	p := &Proxy{released: make(chan struct{}), heldCh: make(chan struct{}, 1024), lis: lis, done: make(chan struct{})}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "docker"})
			r.Out.Host = "docker"
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", upstream)
			},
		},
		FlushInterval: -1, // stream events and logs as they come
		// A client that went away (a killed node) is not worth a log line.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				http.Error(w, `{"message":"proxy: `+err.Error()+`"}`, http.StatusBadGateway)
			}
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rule := p.ruleFor(r)
		if rule.Hold {
			p.mu.Lock()
			p.held++
			rel := p.released
			p.mu.Unlock()
			select {
			case p.heldCh <- struct{}{}:
			default:
			}
			select {
			case <-rel:
			case <-r.Context().Done():
				return // the client is gone: never forward
			}
			if r.Context().Err() != nil {
				return
			}
		}
		if rule.Delay > 0 {
			select {
			case <-time.After(rule.Delay):
			case <-r.Context().Done():
				return
			}
		}
		if rule.Fail != 0 {
			http.Error(w, `{"message":"injected fault"}`, rule.Fail)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(lis)
	}()
	return p, nil
}

func (p *Proxy) ruleFor(r *http.Request) Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rule == nil {
		return Rule{}
	}
	return p.rule(r)
}

// SetRule installs the function that decides each request's fate.
func (p *Proxy) SetRule(f func(*http.Request) Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = f
}

// Held signals each time a request starts being held.
func (p *Proxy) Held() <-chan struct{} { return p.heldCh }

// Release lets every held request through (those whose clients are still
// there) and clears the rule.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.released)
	p.released = make(chan struct{})
	p.rule = nil
}

// Close stops the proxy and waits for it.
func (p *Proxy) Close() error {
	p.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = p.srv.Close()
	}
	<-p.done
	return err
}
