package engine

import (
	"slices"
	"testing"
)

// Lost reports docker0 or any host interface that went away or changed,
// and ignores what other tests' containers and networks on the system
// engine bring and take away (veth ends, br-<id> bridges).
func TestHostNetworkLost(t *testing.T) {
	before := HostNetwork{
		"br-b1753e63c8ab up [192.168.240.1/20]",
		"docker0 up [172.17.0.1/16]",
		"eth0 up [10.0.0.2/24]",
		"lo up [127.0.0.1/8 ::1/128]",
		"veth12ab up []",
	}
	for _, tc := range []struct {
		name string
		now  HostNetwork
		want []string
	}{
		{"unchanged", before, nil},
		{"another test's network and container gone", HostNetwork{
			"docker0 up [172.17.0.1/16]", "eth0 up [10.0.0.2/24]", "lo up [127.0.0.1/8 ::1/128]",
			"br-ffff00001111 up [192.168.0.1/20]",
		}, nil},
		{"docker0 deleted", HostNetwork{
			"br-b1753e63c8ab up [192.168.240.1/20]", "eth0 up [10.0.0.2/24]", "lo up [127.0.0.1/8 ::1/128]",
		}, []string{"docker0 up [172.17.0.1/16]"}},
		{"docker0 lost its address", HostNetwork{
			"docker0 up []", "eth0 up [10.0.0.2/24]", "lo up [127.0.0.1/8 ::1/128]",
		}, []string{"docker0 up [172.17.0.1/16]"}},
		{"eth0 down", HostNetwork{
			"docker0 up [172.17.0.1/16]", "eth0 down [10.0.0.2/24]", "lo up [127.0.0.1/8 ::1/128]",
		}, []string{"eth0 up [10.0.0.2/24]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := before.Lost(tc.now); !slices.Equal(got, tc.want) {
				t.Fatalf("Lost = %q, want %q", got, tc.want)
			}
		})
	}
}
