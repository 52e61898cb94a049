package cli_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/cli"
	"shoal/internal/testenv"
)

// These tests run the built binary against a fake shoal server in the test
// process. A real node cannot be made to answer with warnings, DATA_LOSS,
// a stream cap or a cut exec stream on demand; the fake can, and it records
// requests exactly, so credential values can be checked byte for byte
// without a container.

type fakeShoal struct {
	shoalv1.UnimplementedShoalServer
	mu       sync.Mutex
	creates  []*shoalv1.CreateProviderRequest
	updates  []*shoalv1.UpdateProviderRequest
	warnings []string
	items    []*shoalv1.Provider
	getErr   error
	exec     func(*shoalv1.ExecRequest, grpc.ServerStreamingServer[shoalv1.ExecChunk]) error
}

func (f *fakeShoal) CreateProvider(_ context.Context, r *shoalv1.CreateProviderRequest) (*shoalv1.Provider, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, r)
	return &shoalv1.Provider{Meta: r.Provider.Meta, Type: r.Provider.Type}, nil
}

func (f *fakeShoal) UpdateProvider(_ context.Context, r *shoalv1.UpdateProviderRequest) (*shoalv1.Provider, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, r)
	return &shoalv1.Provider{Meta: r.Provider.Meta}, nil
}

func (f *fakeShoal) ListProviders(context.Context, *shoalv1.ListProvidersRequest) (*shoalv1.ListProvidersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &shoalv1.ListProvidersResponse{Items: f.items, Warnings: f.warnings}, nil
}

func (f *fakeShoal) ListSandboxes(context.Context, *shoalv1.ListSandboxesRequest) (*shoalv1.ListSandboxesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &shoalv1.ListSandboxesResponse{Warnings: f.warnings}, nil
}

func (f *fakeShoal) GetSandbox(context.Context, *shoalv1.GetSandboxRequest) (*shoalv1.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return nil, f.getErr
}

func (f *fakeShoal) Exec(r *shoalv1.ExecRequest, s grpc.ServerStreamingServer[shoalv1.ExecChunk]) error {
	f.mu.Lock()
	exec := f.exec
	f.mu.Unlock()
	return exec(r, s)
}

func (f *fakeShoal) set(fn func(*fakeShoal)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeShoal) lastCreate() *shoalv1.CreateProviderRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.creates) == 0 {
		return nil
	}
	return f.creates[len(f.creates)-1]
}

func (f *fakeShoal) counts() (creates, updates int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.creates), len(f.updates)
}

// startFake serves f on a loopback port until the test ends.
func startFake(t *testing.T, f *fakeShoal) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	shoalv1.RegisterShoalServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// noSecret fails the test if any secret appears in what the CLI printed.
func noSecret(t *testing.T, what string, r result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
			t.Errorf("%s: the output shows the secret %q\nstdout: %s\nstderr: %s", what, s, r.stdout, r.stderr)
		}
	}
}

func TestCredentialFlagsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	f := &fakeShoal{}
	ep := startFake(t, f)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Comments, blank lines, CRLF, and values holding "=", "," and spaces,
	// which must arrive exactly.
	good := write("good.env", "# a comment\n\n  # indented comment\nFILE_A=a=b,c d \r\n   \nFILE_B==x\n")
	env := []string{"FROM_ENV=env,value with spaces", "OTHER_ENV=x"}

	// All sources at once, flags before and after the name.
	r := runWith(t, bin, ep, runOpts{env: env, stdin: "STDIN_KEY=from-stdin\n"},
		"provider", "create", "--credential-file", good, "p", "--type", "generic",
		"--credential-from-env", "FROM_ENV", "--credential-file", "-", "--credential", "CLI_KEY=v1,v2").must(t, 0, "create from all sources")
	want := map[string]string{"FILE_A": "a=b,c d ", "FILE_B": "=x", "FROM_ENV": "env,value with spaces", "STDIN_KEY": "from-stdin", "CLI_KEY": "v1,v2"}
	got := f.lastCreate()
	if got == nil || got.Provider.Meta.Name != "p" || !reflect.DeepEqual(got.Provider.Credentials, want) {
		t.Fatalf("credentials sent:\n got %v\nwant %v", got.GetProvider().GetCredentials(), want)
	}
	noSecret(t, "create", r, "from-stdin", "env,value")

	// Update: a credential flag alone replaces the credentials.
	runWith(t, bin, ep, runOpts{env: env}, "provider", "update", "p", "--credential-from-env", "OTHER_ENV").must(t, 0, "update from env")
	f.mu.Lock()
	u := f.updates[len(f.updates)-1]
	f.mu.Unlock()
	if !u.UpdateCredentials || u.UpdateConfig || u.UpdateLabels || !reflect.DeepEqual(u.Provider.Credentials, map[string]string{"OTHER_ENV": "x"}) {
		t.Fatalf("update sent %v", u)
	}
	runWith(t, bin, ep, runOpts{stdin: "K=stdin-for-update"}, "provider", "update", "p", "--credential-file", "-").must(t, 0, "update from stdin")
	f.mu.Lock()
	u = f.updates[len(f.updates)-1]
	f.mu.Unlock()
	if !u.UpdateCredentials || !reflect.DeepEqual(u.Provider.Credentials, map[string]string{"K": "stdin-for-update"}) {
		t.Fatalf("update from stdin sent %v", u)
	}

	// Usage errors: exit 2, the message names what is wrong, never a
	// value, and nothing is sent.
	const secret = "nvapi-MUST-NOT-LEAK"
	bad := write("bad.env", "# ok\nGOOD=1\n"+secret+"\nLATER=2\n")
	spaced := write("spaced.env", "KEY = "+secret+"\n")
	empty := write("empty.env", "# nothing here\n\n")
	creates, updates := f.counts()
	for _, tc := range []struct {
		what  string
		o     runOpts
		args  []string
		names string // must appear in stderr
	}{
		{"bad line", runOpts{}, []string{"--credential-file", bad}, bad + " line 3"},
		{"spaces around =", runOpts{}, []string{"--credential-file", spaced}, spaced + " line 1"},
		{"bad stdin line", runOpts{stdin: "A=1\n\n" + secret + "\n"}, []string{"--credential-file", "-"}, "line 3"},
		{"empty file", runOpts{}, []string{"--credential-file", empty}, "holds no KEY=VALUE"},
		{"empty value", runOpts{}, []string{"--credential-file", write("empty-value.env", "A=1\nEMPTY=\n")}, "empty-value.env line 2"},
		{"bare base64 token", runOpts{}, []string{"--credential-file", write("bare.env", secret+"==\n")}, "bare.env line 1"},
		{"binary value", runOpts{}, []string{"--credential-file", write("binary.env", "BIN=\xff\xfe"+secret+"\n")}, "not valid UTF-8"},
		{"missing file", runOpts{}, []string{"--credential-file", filepath.Join(dir, "nope")}, "nope"},
		{"stdin twice", runOpts{stdin: "A=1\n"}, []string{"--credential-file", "-", "--credential-file", "-"}, "standard input"},
		{"env unset", runOpts{}, []string{"--credential-from-env", "NOT_SET_ANYWHERE"}, "NOT_SET_ANYWHERE"},
		{"env given KEY=VALUE", runOpts{}, []string{"--credential-from-env", "K=" + secret}, "--credential-from-env"},
		{"credential without =", runOpts{}, []string{"--credential", secret}, "--credential"},
		{"credential with comma", runOpts{}, []string{"--credential", secret + "," + secret}, "--credential"},
		{"key twice in file and env", runOpts{env: []string{"GOOD=" + secret}}, []string{"--credential-file", write("env-dup.env", "GOOD="+secret+"\n"), "--credential-from-env", "GOOD"}, "GOOD"},
		{"key twice", runOpts{env: []string{"DUP=" + secret}}, []string{"--credential", "DUP=" + secret, "--credential-from-env", "DUP"}, "DUP"},
		{"key twice in file and stdin", runOpts{stdin: "GOOD=" + secret}, []string{"--credential-file", write("one.env", "GOOD="+secret+"\n"), "--credential-file", "-"}, "GOOD"},
	} {
		for _, verb := range [][]string{{"provider", "create", "q", "--type", "generic"}, {"provider", "update", "q"}} {
			r := runWith(t, bin, ep, tc.o, append(append([]string{}, verb...), tc.args...)...)
			what := tc.what + " (" + verb[1] + ")"
			if r.code != cli.ExitUsage {
				t.Errorf("%s: exit %d, want %d\nstderr: %s", what, r.code, cli.ExitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.names) {
				t.Errorf("%s: stderr does not name %q: %s", what, tc.names, r.stderr)
			}
			noSecret(t, what, r, secret)
		}
	}
	if c, u := f.counts(); c != creates || u != updates {
		t.Fatalf("usage errors reached the server: creates %d->%d, updates %d->%d", creates, c, updates, u)
	}
}

func TestListShapeAndWarningsThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	f := &fakeShoal{}
	ep := startFake(t, f)
	f.set(func(f *fakeShoal) {
		f.items = []*shoalv1.Provider{{Meta: &shoalv1.ObjectMeta{Name: "only"}}}
		f.warnings = []string{"skipped sandbox default/bad: corrupt record", "second warning"}
	})
	for _, format := range []string{"table", "json", "yaml"} {
		for _, kind := range []string{"provider", "sandbox"} {
			r := run(t, bin, ep, "-o", format, kind, "list").must(t, 0, kind+" list -o "+format)
			want := "warning: skipped sandbox default/bad: corrupt record\nwarning: second warning\n"
			if r.stderr != want {
				t.Errorf("%s list -o %s: stderr %q, want %q", kind, format, r.stderr, want)
			}
			if strings.Contains(r.stdout, "warning") {
				t.Errorf("%s list -o %s: a warning on stdout: %s", kind, format, r.stdout)
			}
			if format == "table" {
				continue
			}
			// stdout parses, and is a list whatever the count (1 provider, 0 sandboxes).
			items := parseItems(t, format, r.stdout)
			if n := map[string]int{"provider": 1, "sandbox": 0}[kind]; len(items) != n {
				t.Errorf("%s list -o %s: %d items, want %d: %s", kind, format, len(items), n, r.stdout)
			}
		}
	}
}

// parseItems parses `list -o json|yaml` output and returns its items; the
// test fails unless the output is exactly {"items": [...]}.
func parseItems(t *testing.T, format, out string) []map[string]any {
	t.Helper()
	b := []byte(out)
	if format == "yaml" {
		var err error
		if b, err = yaml.YAMLToJSON(b); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, out)
		}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	raw, ok := doc["items"]
	if len(doc) != 1 || !ok {
		t.Fatalf("want exactly {\"items\": [...]}, got:\n%s", out)
	}
	var items []map[string]any
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		t.Fatalf("items is not a list (err %v): %s", err, raw)
	}
	return items
}

// A response bigger than gRPC's default 4 MiB receive limit, but within the
// server's send limit, must reach the CLI.
func TestLargeResponseWithinServerLimit(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	f := &fakeShoal{}
	ep := startFake(t, f)
	var items []*shoalv1.Provider
	total := 0
	for i := 0; total < 6<<20; i++ {
		v := strings.Repeat("x", 60<<10)
		items = append(items, &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "p"}, Config: map[string]string{"V": v}})
		total += len(v)
	}
	if total >= shoal.MaxResponseBytes {
		t.Fatalf("test response of %d bytes is over the server limit %d", total, shoal.MaxResponseBytes)
	}
	f.set(func(f *fakeShoal) { f.items = items })
	r := run(t, bin, ep, "-o", "json", "provider", "list").must(t, 0, "6 MiB list")
	if got := len(parseItems(t, "json", r.stdout)); got != len(items) {
		t.Fatalf("%d items, want %d", got, len(items))
	}
}

func TestNewErrorCodesThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	f := &fakeShoal{}
	ep := startFake(t, f)
	for _, tc := range []struct {
		err  error
		code int
		hint string
	}{
		{status.Error(codes.ResourceExhausted, "node n1 has 256 open streams, its cap"), cli.ExitUnavailable, "retry later"},
		{status.Error(codes.DataLoss, "sandbox default/x: stored record does not decode"), cli.ExitError, "`shoal sandbox delete NAME` removes it"},
	} {
		f.set(func(f *fakeShoal) { f.getErr = tc.err })
		r := run(t, bin, ep, "sandbox", "get", "x")
		if r.code != tc.code || !strings.Contains(r.stderr, status.Convert(tc.err).Message()) || !strings.Contains(r.stderr, "Hint: ") || !strings.Contains(r.stderr, tc.hint) {
			t.Errorf("%v: exit %d, want %d with hint %q; stderr:\n%s", status.Code(tc.err), r.code, tc.code, tc.hint, r.stderr)
		}
	}
}

func TestExecStreamThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	f := &fakeShoal{}
	ep := startFake(t, f)
	send := func(s grpc.ServerStreamingServer[shoalv1.ExecChunk], stream, data string) error {
		return s.Send(&shoalv1.ExecChunk{Stream: stream, Data: []byte(data)})
	}
	// Interleaved output in many chunks, then the exit code.
	f.set(func(f *fakeShoal) {
		f.exec = func(_ *shoalv1.ExecRequest, s grpc.ServerStreamingServer[shoalv1.ExecChunk]) error {
			for i := range 100 {
				if err := send(s, "stdout", strings.Repeat("o", i)); err != nil {
					return err
				}
				if err := send(s, "stderr", strings.Repeat("e", i)); err != nil {
					return err
				}
			}
			return s.Send(&shoalv1.ExecChunk{Exited: true, ExitCode: 42})
		}
	})
	r := run(t, bin, ep, "sandbox", "exec", "sb", "--", "cmd")
	var wantOut, wantErr strings.Builder
	for i := range 100 {
		wantOut.WriteString(strings.Repeat("o", i))
		wantErr.WriteString(strings.Repeat("e", i))
	}
	if r.code != 42 || r.stdout != wantOut.String() || r.stderr != wantErr.String() {
		t.Fatalf("exec: exit %d (want 42), stdout %d bytes (want %d), stderr %q", r.code, len(r.stdout), wantOut.Len(), r.stderr)
	}

	// The stream ends cleanly but without the exit chunk: not a success.
	f.set(func(f *fakeShoal) {
		f.exec = func(_ *shoalv1.ExecRequest, s grpc.ServerStreamingServer[shoalv1.ExecChunk]) error {
			return send(s, "stdout", "partial")
		}
	})
	r = run(t, bin, ep, "sandbox", "exec", "sb", "--", "cmd")
	if r.code != cli.ExitError || r.stdout != "partial" || !strings.Contains(r.stderr, "ended before the command's exit code arrived") {
		t.Fatalf("exec without exit chunk: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// The stream fails mid-way: the output so far, then the error's code.
	f.set(func(f *fakeShoal) {
		f.exec = func(_ *shoalv1.ExecRequest, s grpc.ServerStreamingServer[shoalv1.ExecChunk]) error {
			if err := send(s, "stdout", "before"); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "node shutting down")
		}
	})
	r = run(t, bin, ep, "sandbox", "exec", "sb", "--", "cmd")
	if r.code != cli.ExitUnavailable || r.stdout != "before" || !strings.Contains(r.stderr, "node shutting down") {
		t.Fatalf("exec failing mid-stream: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// --stdin streams (ExecInteractive, no size limit): cli/iexec_e2e_test.go.
}
