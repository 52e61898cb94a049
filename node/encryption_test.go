package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/embedetcd"
	"shoal/encryption"
	"shoal/internal/testenv"
	"shoal/node"
)

// syncBuffer is a log sink the node writes from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A known credential goes in through the API of a node with mutual TLS and
// a key ring, and reaches the sandbox's container environment; it is in
// no raw etcd value, no log line (debug level), no trace span and no API
// response. A
// rotation after the key file gains a new current key re-encrypts it, and
// the sandbox's environment is unchanged. (Hollow runtime: exec env shows
// the container's environment as a real one has it.)
func TestCredentialOnlyInTheContainer(t *testing.T) {
	t.Parallel()
	const secret = "nvapi-only-in-the-container-4f7a9c"
	cfg := testenv.NodeConfig(t)
	cfg.Runtime = node.RuntimeHollow
	dir := certs(t, cfg.ID)
	secure(&cfg, files(dir, cfg.ID))
	keyFile := filepath.Join(t.TempDir(), "keys.yaml")
	k1, err := encryption.NewKeyFile(nil, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, k1, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.EncryptionKeyFile = keyFile
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg.Tracer = tp
	n := testenv.StartNode(t, cfg)
	ctx := ctxT(t, 3*time.Minute)

	tr, err := files(dir, "admin").Transport()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api, cluster := shoalv1.NewShoalClient(conn), shoalv1.NewClusterClient(conn)
	var responses []proto.Message
	keep := func(m proto.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		responses = append(responses, m)
	}
	keep(api.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "nv"},
		Type: shoalv1.ProviderType_NVIDIA, Credentials: map[string]string{"NVIDIA_API_KEY": secret}}}))
	keep(api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "agent"},
		Spec: &shoalv1.SandboxSpec{Providers: []string{"nv"}}}}))
	envHas := func() bool {
		t.Helper()
		out, code := execEnv(t, ctx, api, "agent")
		return code == 0 && strings.Contains(out, "NVIDIA_API_KEY="+secret)
	}
	if !envHas() {
		t.Fatal("the credential is not in the container's environment")
	}
	keep(api.GetProvider(ctx, &shoalv1.GetProviderRequest{Name: "nv"}))
	keep(api.ListProviders(ctx, &shoalv1.ListProvidersRequest{}))
	keep(api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Name: "agent"}))
	keep(api.ListSandboxes(ctx, &shoalv1.ListSandboxesRequest{}))
	rot, err := cluster.RotateEncryptionKey(ctx, &shoalv1.RotateEncryptionKeyRequest{})
	keep(rot, err)
	if rot.Key != "k1" || rot.Rewritten != 0 || rot.Current != 1 {
		t.Fatalf("rotation under the key already current: %v", rot)
	}

	// etcd serves node certificates only (an admin's is refused there).
	nodeTr, err := files(dir, cfg.ID).Transport()
	if err != nil {
		t.Fatal(err)
	}
	rawClient := func() *clientv3.Client {
		c, err := embedetcd.Dial([]string{n.EtcdEndpoint()}, embedetcd.WithTLS(nodeTr.ClientTLS()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	raw := rawClient()
	scan := func(when string) {
		t.Helper()
		resp, err := raw.Get(ctx, "", clientv3.WithFromKey())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if bytes.Contains(kv.Value, []byte(secret)) {
				t.Fatalf("%s: etcd key %s holds the credential", when, kv.Key)
			}
		}
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("%s: the node's log holds the credential", when)
		}
		ended := spans.Ended()
		if len(ended) == 0 {
			t.Fatalf("%s: no spans recorded: nothing was checked", when)
		}
		for _, sp := range ended {
			text := fmt.Sprint(sp.Name(), sp.Attributes(), sp.Events(), sp.Status(), sp.Links())
			if strings.Contains(text, secret) {
				t.Fatalf("%s: span %s holds the credential", when, sp.Name())
			}
		}
		for _, m := range responses {
			if b, _ := protojson.Marshal(m); bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s: an API response holds the credential: %s", when, b)
			}
		}
	}
	scan("under k1")

	// The key file gains k2 (current); the node restarts with it and the
	// rotation moves the provider to k2.
	k12, err := encryption.NewKeyFile(k1, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, k12, 0o600); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	conn.Close()
	n = testenv.StartNode(t, cfg)
	conn2, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(tr.DialCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	api, cluster = shoalv1.NewShoalClient(conn2), shoalv1.NewClusterClient(conn2)
	rot, err = cluster.RotateEncryptionKey(ctx, &shoalv1.RotateEncryptionKeyRequest{})
	keep(rot, err)
	if rot.Key != "k2" || rot.Rewritten != 1 || len(rot.Failed) != 0 {
		t.Fatalf("rotation to k2: %v", rot)
	}
	raw = rawClient()
	resp, err := raw.Get(ctx, "/shoal/providers/default/nv")
	if err != nil || len(resp.Kvs) != 1 || !bytes.Contains(resp.Kvs[0].Value, []byte(encryption.Prefix+"k2:")) {
		t.Fatalf("the stored provider is not under k2: %v", err)
	}
	// The restarted hollow node lost its simulated containers: a new
	// sandbox gets the credential opened from k2.
	keep(api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Wait: true, Sandbox: &shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "agent2"},
		Spec: &shoalv1.SandboxSpec{Providers: []string{"nv"}}}}))
	out, code := execEnv(t, ctx, api, "agent2")
	if code != 0 || !strings.Contains(out, "NVIDIA_API_KEY="+secret) {
		t.Fatal("after rotation the credential is not in the new container's environment")
	}
	scan("under k2")

	// After the rotation, the node started with the old key file or with
	// none is refused at start, saying why: it would seal new credentials
	// under k1 or store them in plaintext, and could not open k2's.
	n.Stop()
	oldFile := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(oldFile, k1, 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{oldFile: `lacks key "k2", the cluster's current key`, "": "has no --encryption-key-file"} {
		bad := cfg
		bad.EncryptionKeyFile = file
		nn, err := node.New(bad)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = nn.Run(rctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--encryption-key-file") {
			t.Errorf("start with key file %q after the rotation: %v; want a refusal saying %q", file, err, want)
		}
	}
}

// execEnv runs env in a sandbox and returns its stdout and exit code.
func execEnv(t *testing.T, ctx context.Context, c shoalv1.ShoalClient, name string) (string, int32) {
	t.Helper()
	st, err := c.Exec(ctx, &shoalv1.ExecRequest{Name: name, Command: []string{"env"}})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		r, err := st.Recv()
		if err == io.EOF {
			t.Fatalf("exec env in %s: no exit code", name)
		}
		if err != nil {
			t.Fatalf("exec env in %s: %v", name, err)
		}
		if r.GetStream() == "stdout" {
			out.Write(r.GetData())
		}
		if r.GetExited() {
			return out.String(), r.GetExitCode()
		}
	}
}
