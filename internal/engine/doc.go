// Package engine starts and removes private Docker engines: one extra
// dockerd per simulated host, so that a container of one shoal node is on
// that node's engine only. The test harness (internal/testenv) and the
// cluster chaos hosts (chaos/hosts) both use it.
//
// A private engine is a dockerd beside the system one with its own socket,
// data root, exec root and pid file under one directory
// (/tmp/shoal-eng-XXXX: short, because the socket's path must fit a unix
// socket address), an empty config file (the host's daemon.json is not its
// own), no bridge and no iptables rules, a network namespace of its own
// (so that nothing it does touches the host's interfaces: a dockerd with
// --bridge none deletes its namespace's docker0), and the system
// containerd shared under a containerd namespace of its own. HostNetwork
// records the host's interfaces, for tests that prove engines leave them
// alone. The images it needs are copied
// from the system engine (save, then load): nothing is pulled. Its API
// socket is alone in a directory of its own (Engine.SocketDir), so that the
// directory can be bind-mounted into a container without the engine's
// mounts coming along.
//
// It needs root, dockerd and a containerd socket; Unsupported says what is
// missing, and SHOAL_SHARED_ENGINE=1 makes it report that too. The caller
// then falls back to the system engine (System), shared by every host and
// told apart only by shoal's node labels.
//
// Close removes an engine's containers and images, stops its dockerd
// (SIGTERM, then SIGKILL), unmounts what it left, deletes its containerd
// namespaces and its directory. A process that dies without closing its
// engines leaves them to the next one: the directory is locked (flock) for
// as long as its owner lives, dockerd gets SIGTERM when its parent dies,
// and SweepStale removes the directories nobody holds the lock of.
package engine
