package etcdmember

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// InitialCluster is a parsed --etcd-initial-cluster: name=peerURL pairs in
// the order given.
type InitialCluster []Peer

// Peer is one name=URL entry of an initial cluster.
type Peer struct{ Name, URL string }

// URLs are the peer URLs of the member called name.
func (ic InitialCluster) URLs(name string) []string {
	var us []string
	for _, p := range ic {
		if p.Name == name {
			us = append(us, p.URL)
		}
	}
	return us
}

// String is the value etcd takes.
func (ic InitialCluster) String() string {
	parts := make([]string, len(ic))
	for i, p := range ic {
		parts[i] = p.Name + "=" + p.URL
	}
	return strings.Join(parts, ",")
}

// ParseInitialCluster parses etcd's --initial-cluster syntax,
// name=URL[,name=URL...]; a name may repeat (a member with several peer
// URLs), a URL may not.
func ParseInitialCluster(s string) (InitialCluster, error) {
	var ic InitialCluster
	seen := map[string]string{}
	for _, entry := range strings.Split(s, ",") {
		name, u, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("%q is not name=URL (want name=URL[,name=URL...], like n1=http://10.0.0.1:2380,n2=http://10.0.0.2:2380)", entry)
		}
		if err := CheckName(name); err != nil {
			return nil, err
		}
		if err := CheckURL("", u); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if Unspecified(u) {
			return nil, fmt.Errorf("%s: %q is an unspecified address; give the URL the other members dial", name, u)
		}
		u = Normalize(u)
		if other, dup := seen[u]; dup {
			return nil, fmt.Errorf("%s and %s share the peer URL %s", other, name, u)
		}
		seen[u] = name
		ic = append(ic, Peer{Name: name, URL: u})
	}
	return ic, nil
}

// CheckName checks a member name (shoal uses the node id): it must fit
// etcd's name=URL,... syntax.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("a member name must not be empty")
	}
	if strings.ContainsAny(name, ",= \t\r\n") {
		return fmt.Errorf("member name %q must not contain ',', '=' or white space", name)
	}
	return nil
}

// CheckURL checks that u is an http(s) URL with a host and a port. field,
// if not empty, names the flag in the error.
func CheckURL(field, u string) error {
	p, err := url.Parse(u)
	if err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Hostname() != "" && p.Port() != "" && (p.Path == "" || p.Path == "/") {
		return nil
	}
	msg := fmt.Sprintf("%q is not a URL like http://127.0.0.1:2379 (http or https, host and port)", u)
	if field != "" {
		return fmt.Errorf("%s: %s", field, msg)
	}
	return fmt.Errorf("%s", msg)
}

// Unspecified reports whether a URL's host is 0.0.0.0 or ::, which
// nobody can dial.
func Unspecified(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	ip := net.ParseIP(p.Hostname())
	return ip != nil && ip.IsUnspecified()
}

// Normalize writes a URL the way etcd compares them (no trailing slash).
func Normalize(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = ""
	return p.String()
}
