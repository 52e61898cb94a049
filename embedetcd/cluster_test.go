package embedetcd_test

import (
	"strings"
	"testing"

	"shoal/embedetcd"
)

func TestConfigValidateNamesTheFlag(t *testing.T) {
	base := func() embedetcd.Config {
		c := embedetcd.DefaultConfig(t.TempDir())
		c.Name = "n1"
		return c
	}
	for _, tc := range []struct {
		name string
		mod  func(*embedetcd.Config)
		flag string // "" means valid
	}{
		{"defaults", func(*embedetcd.Config) {}, ""},
		{"three voters", func(c *embedetcd.Config) {
			c.InitialCluster = "n1=http://127.0.0.1:2380,n2=http://127.0.0.2:2380,n3=http://127.0.0.3:2380"
		}, ""},
		{"advertised behind 0.0.0.0", func(c *embedetcd.Config) {
			c.ListenPeer, c.ListenClient = "http://0.0.0.0:2380", "http://0.0.0.0:2379"
			c.AdvertisePeer, c.AdvertiseClient = "http://10.0.0.1:2380", "http://10.0.0.1:2379"
			c.InitialCluster = "n1=http://10.0.0.1:2380,n2=http://10.0.0.2:2380"
		}, ""},
		{"existing", func(c *embedetcd.Config) { c.InitialClusterState = "existing" }, ""},
		{"bad listen client", func(c *embedetcd.Config) { c.ListenClient = "127.0.0.1:2379" }, "etcd-listen-client"},
		{"bad listen peer", func(c *embedetcd.Config) { c.ListenPeer = "http://:2380" }, "etcd-listen-peer"},
		{"bad advertise client", func(c *embedetcd.Config) { c.AdvertiseClient = "nope" }, "etcd-advertise-client"},
		{"unspecified advertise peer", func(c *embedetcd.Config) { c.AdvertisePeer = "http://0.0.0.0:2380" }, "etcd-advertise-peer"},
		{"listen on all, no advertise", func(c *embedetcd.Config) { c.ListenClient = "http://0.0.0.0:2379" }, "etcd-advertise-client"},
		{"bad state", func(c *embedetcd.Config) { c.InitialClusterState = "old" }, "etcd-initial-cluster-state"},
		{"bad cluster", func(c *embedetcd.Config) { c.InitialCluster = "n1" }, "etcd-initial-cluster"},
		{"own name missing", func(c *embedetcd.Config) { c.InitialCluster = "n2=http://127.0.0.2:2380" }, "etcd-initial-cluster"},
		{"own URL differs", func(c *embedetcd.Config) { c.InitialCluster = "n1=http://127.0.0.9:2380" }, "etcd-initial-cluster"},
		{"bad name", func(c *embedetcd.Config) { c.Name = "a=b" }, "node-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mod(&c)
			err := c.Validate()
			if tc.flag == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
				t.Fatalf("error %v, want one starting %q", err, tc.flag+":")
			}
		})
	}
}
