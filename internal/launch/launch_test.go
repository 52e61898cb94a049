package launch_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"shoal/internal/launch"
)

func TestArgs(t *testing.T) {
	tests := []struct {
		name string
		n    launch.Node
		want string
	}{
		{"worker", launch.Node{ID: "w1", Listen: "127.0.0.1:1", EtcdEndpoints: []string{"http://a", "http://b"},
			LeaseTTL: 2 * time.Second, LogLevel: "warn", Extra: []string{"--runtime", "hollow"}},
			"node start --node-id w1 --listen 127.0.0.1:1 --etcd-endpoints http://a,http://b --lease-ttl 2s --log-level warn --runtime hollow"},
		{"voter joining", launch.Node{ID: "v2", DataDir: "/data", Insecure: true,
			Member: &launch.Member{ListenClient: "http://0.0.0.0:2379", ListenPeer: "http://0.0.0.0:2380", Join: "10.0.0.1:7443"}},
			"node start --node-id v2 --data-dir /data --etcd-listen-client http://0.0.0.0:2379 --etcd-listen-peer http://0.0.0.0:2380 --join 10.0.0.1:7443 --insecure"},
		{"voter with TLS", launch.Node{ID: "v1", Member: &launch.Member{InitialCluster: "v1=https://x"}, TLS: &launch.TLS{Cert: "c", Key: "k", CA: "ca"}},
			"node start --node-id v1 --etcd-initial-cluster v1=https://x --tls-cert c --tls-key k --tls-ca ca"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.n.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(tc.n.Args(), " "); got != tc.want {
				t.Fatalf("args\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for want, n := range map[string]launch.Node{
		"Node.ID":                       {EtcdEndpoints: []string{"x"}},
		"neither EtcdEndpoints":         {ID: "a"},
		"both EtcdEndpoints":            {ID: "a", EtcdEndpoints: []string{"x"}, Member: &launch.Member{Join: "j"}},
		"InitialCluster and Join":       {ID: "a", Member: &launch.Member{}},
		"both Insecure and TLS are set": {ID: "a", EtcdEndpoints: []string{"x"}, Insecure: true, TLS: &launch.TLS{}},
	} {
		if err := n.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want an error with %q", n, err, want)
		}
	}
}

func TestStartRunsTheBinaryWithTheArgsEnvAndLog(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "shoal")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\" \"$LAUNCH_TEST\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "node.log")
	if err := os.WriteFile(log, []byte("before\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := launch.Node{ID: "n1", EtcdEndpoints: []string{"http://e"}}
	p, err := launch.Start(launch.Process{Binary: bin, Log: log, Env: []string{"LAUNCH_TEST=yes"}, KillWithParent: true}, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "before\n" + strings.Join(append(slices.Clone(n.Args()), "yes"), " ") + "\n"
	if string(got) != want {
		t.Fatalf("log %q, want %q (appended: args, then the env)", got, want)
	}
	if _, err := launch.Start(launch.Process{Binary: bin, Log: log}, launch.Node{ID: "n2"}); err == nil {
		t.Fatal("a node with no etcd started")
	}
}
