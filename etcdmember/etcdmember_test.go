package etcdmember_test

import (
	"strings"
	"testing"

	"shoal/etcdmember"
)

func TestParseInitialCluster(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "n1=http://10.0.0.1:2380", want: "n1=http://10.0.0.1:2380"},
		{in: "n1=http://10.0.0.1:2380/,n2=https://b.example:2380", want: "n1=http://10.0.0.1:2380,n2=https://b.example:2380"},
		{in: "n1=http://10.0.0.1:2380,n1=http://10.0.1.1:2380", want: "n1=http://10.0.0.1:2380,n1=http://10.0.1.1:2380"},
		{in: "", err: "is not name=URL"},
		{in: "n1", err: "is not name=URL"},
		{in: "=http://10.0.0.1:2380", err: "is not name=URL"},
		{in: "n1=10.0.0.1:2380", err: "is not a URL"},
		{in: "n1=http://10.0.0.1", err: "is not a URL"},
		{in: "n1=ftp://10.0.0.1:2380", err: "is not a URL"},
		{in: "n1=http://0.0.0.0:2380", err: "unspecified"},
		{in: "n1=http://[::]:2380", err: "unspecified"},
		{in: "n1=http://a:1,n2=http://a:1", err: "share the peer URL"},
		{in: "n 1=http://a:1", err: "white space"},
	} {
		ic, err := etcdmember.ParseInitialCluster(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && ic.String() != tc.want:
			t.Errorf("%q: parsed as %q, want %q", tc.in, ic.String(), tc.want)
		}
	}
}

// Every bad config is refused naming the flag that holds the bad value.

// What parses prints back to itself, and parses again the same.
func FuzzParseInitialCluster(f *testing.F) {
	for _, s := range []string{"n1=http://10.0.0.1:2380", "a=http://a:1,b=https://b:2", "x=http://[::1]:2380", "=", ",", "a=http://a:1,a=http://a:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ic, err := etcdmember.ParseInitialCluster(s)
		if err != nil {
			return
		}
		again, err := etcdmember.ParseInitialCluster(ic.String())
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", s, ic.String(), err)
		}
		if again.String() != ic.String() {
			t.Fatalf("%q: %q became %q", s, ic.String(), again.String())
		}
	})
}
