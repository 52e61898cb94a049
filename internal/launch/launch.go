package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"shoal/internal/proc"
)

// Node is one node a harness runs: its `shoal node start` flags. A zero
// field leaves its flag out (the node's default).
type Node struct {
	ID            string
	Listen        string // API address
	Advertise     string // API address the others dial, if not Listen
	DataDir       string
	DebugListen   string
	MetricsListen string
	DockerHost    string
	Image         string
	Prefix        string // etcd key prefix

	// Etcd is either EtcdEndpoints (the node is an etcd client only: a
	// worker, or a node of an external etcd) or Member (a voter).
	EtcdEndpoints []string
	Member        *Member

	LeaseTTL, NodeTTL, Resync, OrphanGrace, FenceMargin time.Duration

	LogFormat, LogLevel string
	// Insecure serves plaintext; TLS, if set, are the node's files.
	Insecure bool
	TLS      *TLS

	// Extra flags, last (a test's own, a hollow runtime's).
	Extra []string
}

// Member is a voter's embedded etcd member: what it listens on and
// advertises, and either the initial cluster it starts with or the node
// whose API it joins through.
type Member struct {
	ListenClient, AdvertiseClient string
	ListenPeer, AdvertisePeer     string
	InitialCluster                string
	Join                          string
}

// TLS are a node's certificate, key and CA files.
type TLS struct{ Cert, Key, CA string }

// Validate names the field a Node got wrong.
func (n Node) Validate() error {
	switch {
	case n.ID == "":
		return errors.New("launch: Node.ID is empty")
	case n.Member == nil && len(n.EtcdEndpoints) == 0:
		return fmt.Errorf("launch: node %s: neither EtcdEndpoints nor Member is set", n.ID)
	case n.Member != nil && len(n.EtcdEndpoints) > 0:
		return fmt.Errorf("launch: node %s: both EtcdEndpoints and Member are set", n.ID)
	case n.Member != nil && (n.Member.InitialCluster == "") == (n.Member.Join == ""):
		return fmt.Errorf("launch: node %s: Member needs exactly one of InitialCluster and Join", n.ID)
	case n.Insecure && n.TLS != nil:
		return fmt.Errorf("launch: node %s: both Insecure and TLS are set", n.ID)
	}
	return nil
}

// Args are n's `shoal node start` command line (without the binary).
func (n Node) Args() []string {
	a := []string{"node", "start", "--node-id", n.ID}
	str := func(flag, v string) {
		if v != "" {
			a = append(a, flag, v)
		}
	}
	dur := func(flag string, d time.Duration) {
		if d != 0 {
			a = append(a, flag, d.String())
		}
	}
	str("--listen", n.Listen)
	str("--advertise", n.Advertise)
	str("--data-dir", n.DataDir)
	str("--debug-listen", n.DebugListen)
	str("--metrics-listen", n.MetricsListen)
	str("--docker-host", n.DockerHost)
	str("--image", n.Image)
	str("--prefix", n.Prefix)
	if m := n.Member; m != nil {
		str("--etcd-listen-client", m.ListenClient)
		str("--etcd-advertise-client", m.AdvertiseClient)
		str("--etcd-listen-peer", m.ListenPeer)
		str("--etcd-advertise-peer", m.AdvertisePeer)
		str("--join", m.Join)
		str("--etcd-initial-cluster", m.InitialCluster)
	} else {
		str("--etcd-endpoints", strings.Join(n.EtcdEndpoints, ","))
	}
	dur("--lease-ttl", n.LeaseTTL)
	dur("--node-ttl", n.NodeTTL)
	dur("--resync", n.Resync)
	dur("--orphan-grace", n.OrphanGrace)
	dur("--fence-margin", n.FenceMargin)
	str("--log-format", n.LogFormat)
	str("--log-level", n.LogLevel)
	if n.Insecure {
		a = append(a, "--insecure")
	}
	if t := n.TLS; t != nil {
		a = append(a, "--tls-cert", t.Cert, "--tls-key", t.Key, "--tls-ca", t.CA)
	}
	return append(a, n.Extra...)
}

// Process is how Start runs a node: the binary, where its output goes
// (appended), and the environment it gets on top of this process's.
type Process struct {
	Binary string
	Log    string
	Env    []string
	// KillWithParent puts the node in a process group of its own and
	// has the kernel SIGKILL it when this process dies (a test's nodes
	// must not outlive it).
	KillWithParent bool
}

// Start runs n as a child process, reaped by its own goroutine (proc),
// its output appended to p.Log.
func Start(p Process, n Node) (*proc.Process, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	if p.Binary == "" {
		return nil, fmt.Errorf("launch: node %s: Process.Binary is empty", n.ID)
	}
	log, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("launch: node %s: its log: %w", n.ID, err)
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(p.Binary, n.Args()...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), p.Env...)
	if p.KillWithParent {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	pr, err := proc.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("launch: start node %s (%s): %w", n.ID, p.Binary, err)
	}
	return pr, nil
}
