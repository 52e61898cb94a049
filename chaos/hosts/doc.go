// Package hosts runs a cluster of shoal nodes as separate hosts on one
// machine, and injects the host-level faults of the cluster chaos suite:
// it is the system under test that `shoal-lab chaos run --cluster N` drives.
// It owns the hosts and their faults; traffic, scenarios and checkers are
// the chaos runner's.
//
// # The hosts
//
// Start builds the node image from the given static shoal binary (FROM
// scratch; rebuilt only when the binary changed, known by its sha256 in an
// image label), makes the run's private Docker network and starts every
// node, each as a separate host:
//
//   - its own container on the system engine, on the run's network at an
//     address of its own (a bridge network, internal: the nodes reach each
//     other and this machine's address on the bridge, nothing beyond; the
//     subnet is one Docker found free, taken explicitly so that addresses
//     can be given and given back);
//   - its own Docker engine: a private dockerd (package internal/engine)
//     whose socket's directory is bind-mounted into the container, so that
//     its sandboxes' containers are on that engine only. Config.DockerSocket
//     can put a Docker API proxy in between, per node. Where private
//     engines cannot run (not root, no dockerd, no containerd socket,
//     SHOAL_SHARED_ENGINE=1) every node mounts the system engine's socket
//     and SeparateEngines/SharedReason say so; Config.RequireEngines makes
//     that an error;
//   - its data dir, a directory of the run's bind-mounted at /data, so a
//     killed node starts again on its data;
//   - its egress dir (--egress-dir, the sockets its egress proxy serves
//     sandboxes on), bind-mounted at the path it has on this machine: the
//     node's engine mounts a sandbox's socket directory into its sidecar
//     by the path the node names. Config.SandboxImages must hold the
//     sidecar's image (docker.DefaultEgressImage) for egress to work.
//
// Voters embed etcd members formed with --etcd-initial-cluster; workers
// (Config.Workers) list the voters' client URLs with --etcd-endpoints.
// Every node listens on 0.0.0.0 inside its container (the API on 7443,
// a voter's member on 2379 and 2380) and advertises its address. A
// voter's member advertises as its peer URL a TCP proxy of this process
// (package chaos/tcpproxy) on this machine's address on the bridge, in
// front of its peer port, so that every raft message to or from a member
// passes a proxy: that is how SlowPeer adds latency, as etcd's own
// robustness suite does, since the kernel here lacks netem. Clients reach
// every node's API (Addr) and every member's client URL (EtcdEndpoints)
// directly.
//
// # Faults
//
// Each fault is one Docker call (or a proxy setting), safe while traffic
// runs, with an undo that leaves the node as it was:
//
//	Kill / Start             docker kill (SIGKILL) / docker start: same container, data, address
//	Stop / Resume            docker pause / unpause (the cgroup freezer: SIGSTOP semantics);
//	                         the node's sandboxes, on its engine, are untouched
//	Disconnect / Reconnect   docker network disconnect / connect at the same address: the host
//	                         reaches nobody and nobody reaches it, but it still reaches its engine
//	SlowPeer / Unslow        latency on every byte of one voter's peer traffic, both ways
//	ReplaceMember            the node killed for good, its member removed through another
//	                         voter's API, its engine gone; a new voter joins with --join
//
// Restore undoes whatever a fault that failed half-way left, judged from
// what the engine reports: it thaws, starts and reconnects the node (the
// chaos scheduler calls it after a failed injection, before retrying).
//
// WaitServing waits for one node's API, WaitAllHealthy for the whole
// cluster (every node Ready, the members exactly the voters, none a
// learner, all healthy).
//
// # Clean-up
//
// Close removes everything the run made: node containers, peer proxies,
// the network, the engines and their containers, the run's directory
// (unless KeepDir: then each node's log is saved there). Everything the
// run makes on the system engine carries LabelRun and LabelLock, the run's
// directory, which the run holds locked (flock) while it lives. A run that
// died without Close is found by the next Start (its lock is free) and its
// leftovers removed; its private engines are removed by
// engine.SweepStale, their dockerds having been sent SIGTERM when it died.
package hosts
