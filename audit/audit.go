package audit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Record is one audited call.
type Record struct {
	Time time.Time `json:"time"`
	// Node is the node that served the call.
	Node string `json:"node"`
	// Identity is the client certificate's subject ("" on a plaintext
	// node), Role the role it names.
	Identity string `json:"identity"`
	Role     string `json:"role,omitempty"`
	// Peer is the client's address.
	Peer   string `json:"peer,omitempty"`
	Method string `json:"method"`
	// Object is "workspace/name" of what the call touched (its kind is
	// in Method), or the node or member name; empty if none.
	Object string `json:"object,omitempty"`
	// Code is the gRPC status code the call ended with; Error its
	// message when it failed (server text: never a request's values).
	Code  string `json:"code"`
	Error string `json:"error,omitempty"`
	// RequestID correlates the call with the client's (the create's
	// request id, or the shoal-request-id the server returned).
	RequestID  string  `json:"request_id"`
	DurationMS float64 `json:"duration_ms"`
	// ForwardedBy is set on a call another node forwarded (exec, logs).
	ForwardedBy string `json:"forwarded_by,omitempty"`
}

// Options of a Log.
type Options struct {
	// MaxBytes rotates the file once it would grow past this (default
	// 100 MiB); Backups is how many rotated files are kept (FILE.1 the
	// newest; default 5).
	MaxBytes int64
	Backups  int
}

// Log appends records to a file, rotating it by size. It is safe for
// concurrent use; a write error is returned to the caller (who logs it)
// and the next record tries again.
type Log struct {
	path string
	o    Options

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Open opens (or creates, mode 0600) the audit log at path.
func Open(path string, o Options) (*Log, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 100 << 20
	}
	if o.Backups <= 0 {
		o.Backups = 5
	}
	l := &Log{path: path, o: o}
	if err := l.open(); err != nil {
		return nil, fmt.Errorf("--audit-log: %w", err)
	}
	return l, nil
}

func (l *Log) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Write appends one record as a JSON line.
func (l *Log) Write(r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.size > 0 && l.size+int64(len(line)) > l.o.MaxBytes {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	return err
}

// rotate shifts FILE.i to FILE.i+1 (dropping the oldest) and FILE to
// FILE.1, then starts FILE afresh (l.mu held).
func (l *Log) rotate() error {
	l.f.Close()
	l.f = nil
	os.Remove(l.path + "." + strconv.Itoa(l.o.Backups))
	for i := l.o.Backups - 1; i >= 1; i-- {
		os.Rename(l.path+"."+strconv.Itoa(i), l.path+"."+strconv.Itoa(i+1))
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	return l.open()
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
