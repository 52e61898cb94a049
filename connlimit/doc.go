// Package connlimit bounds what a client can hold of a node's API port
// before it has proved anything: the connections accepted but not yet past
// their handshake.
//
// Without it, every TCP connection accepted by grpc costs a file descriptor
// and a goroutine until grpc's handshake deadline (two minutes by default),
// whether or not the client ever sends a byte: twenty thousand idle
// connections, from anyone who can reach the port, exhaust the node's file
// descriptors, and with them its etcd, its clients and its peers.
//
// A Listener wraps the API's net.Listener. A connection it accepts is
// pending until the server has read the HTTP/2 client preface from it
// through the transport credentials: with TLS, after a completed mutual TLS
// handshake (a client certificate of the cluster's CA), in plaintext after
// its first 24 bytes. Pending connections are capped in total
// (Config.MaxPending) and per source address (Config.MaxPendingPerSource;
// an IPv6 /64 is one source); a connection over either cap is closed at
// once (a reset), counted, and logged at most once per LogEvery. A pending
// connection still pending after Config.HandshakeTimeout is closed.
// Connections past the handshake no longer count, so authenticated clients
// and the node's peers keep their connections, and get new ones, while
// idle ones from elsewhere come and go; grpc's keepalive settings
// (Listener.ServerOptions) close the authenticated connections that stay
// idle.
//
// The accounting needs the server to tell the listener when a connection
// is past its handshake: Listener.ServerOptions wraps the server's
// transport credentials for that, and must be among the grpc.Server's
// options (after any other Creds option: grpc applies options in order).
//
// The listener is saturated while its total cap is reached, until the
// pending connections fall to three quarters of it (so that a flood that
// takes every freed slot keeps it saturated); Stats says since when, and
// the node's /readyz fails once that lasts.
package connlimit
