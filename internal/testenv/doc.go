// Package testenv starts the real parts tests run against; there are no
// mocks of etcd or Docker.
//
//   - Etcd: an embedded etcd per test on free loopback ports (testenv.go).
//   - RequireDocker: the system Docker engine and the sandbox image, or a
//     skip (a failure with SHOAL_REQUIRE_DOCKER=1).
//   - StartNode: an in-process node on its own embedded etcd (node.go).
//   - Binary: the shoal binary, $SHOAL_BIN or built once (binary.go);
//     LabBinary: the shoal-lab binary, $SHOAL_LAB_BIN or built once.
//   - StartEngines: a private Docker engine per name (engine.go, on
//     package internal/engine).
//   - StartCluster: a multi-host cluster in one machine (cluster.go).
//   - Eventually: the one poll-until-deadline helper of the tests
//     (poll.go); production code retries with internal/backoff.
//
// # Cluster harness
//
// StartCluster starts N shoal nodes as child processes of the built
// binary (through internal/launch, the launcher the chaos suite and the
// fleet bench share), each with its own node id, API port, data dir, log file, TCP
// proxies to etcd and Docker engine. By default there is one etcd in the
// test process and every node is a worker (`shoal node start
// --etcd-endpoints ...`) that reaches it through a proxy of its own. The
// test drives them by index:
//
//	c := testenv.StartCluster(t, testenv.ClusterConfig{Nodes: 3})
//	c.Client(0).CreateSandbox(...)   // the API of node 0; also ClusterClient
//	c.Engine(0).Client               // node 0's Docker engine
//	c.Kill(2); c.Restart(2)          // SIGKILL; same id, flags, data dir, engine
//	c.Stop(1); c.Resume(1)           // SIGSTOP / SIGCONT: a hung host
//	c.CutOff(1); c.Heal(1)           // node 1 loses etcd, then gets it back
//	c.WaitReady(1)                   // until it serves a list again
//
// With ClusterConfig.Voters = V, nodes 0..V-1 are voters: each embeds an
// etcd member, and they form the etcd cluster with --etcd-initial-cluster;
// the other nodes are workers whose --etcd-endpoints list the voters. Each
// member listens on loopback ports of its own and advertises a proxy in
// front of each (client and peer), so every connection into a member
// passes a proxy. c.Join(0) starts one more voter that joins through node
// 0's API (--join) and returns its index; c.Voter(i) says whether node i
// runs a member, c.MemberClientURL(i) reaches voter i's member past its
// proxy (to read what the member itself holds), and c.Etcd() dials every
// voter.
//
// CutOff(i) with voters is a partition of host i, not only of its clients:
// raft messages flow both ways over whichever member dialed, so refusing
// the connections into member i would leave the ones it dials itself. Each
// proxy therefore names the node process that dialed every connection it
// accepts (the socket's inode in /proc/net/tcp, found in the node
// processes' fd tables; sockowner.go) and CutOff(i) makes every proxy cut
// and refuse node i's connections, and voter i's own proxies refuse
// everyone. Its member then hears from no peer and no client reaches it;
// node i's own client still reaches its own member directly, which answers
// nothing that needs a quorum. Heal(i) undoes both.
//
// Hosts are separate: each node gets an extra dockerd of its own (root
// only), beside the system one and sharing the system containerd under its
// own namespace, with no bridge and no iptables rules, and the sandbox
// image loaded into it from the system engine. A container of node 0 is
// then on node 0's engine only, so a call that must reach it through
// another node can only succeed by going through node 0. Where that is
// impossible (not root, no dockerd, no containerd socket, or
// SHOAL_SHARED_ENGINE=1) every node uses the system engine, the test log
// says so, and Cluster.SeparateEngines is false; SHOAL_REQUIRE_ENGINES=1
// (set by CI) makes that a failure instead.
//
// Everything is torn down when the test ends, in order: every cut healed,
// the nodes (SIGTERM, all at once, then SIGKILL), their containers on every
// engine, the proxies, etcd, then each private engine (its containers, its
// dockerd, its containerd namespace and its files). Each child process has a goroutine
// that reaps it and the harness waits for all of them. A test process that
// dies without its cleanups takes its children with it (the parent-death
// signal), and the next test process that starts an engine removes engine
// directories nobody holds the lock of any more.
//
// Engines are started per test, in parallel, in a few seconds (dockerd
// starts in well under a second; loading the image takes the rest), so no
// state can pass from one test to the next.
package testenv
