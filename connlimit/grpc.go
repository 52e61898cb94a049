package connlimit

import (
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Keepalive of the connections past the handshake. An authenticated
// connection without a call for MaxConnectionIdle is sent a GOAWAY and
// closed (a client reconnects on its next call); one that stops answering
// pings (a host gone) is closed after KeepaliveTime + KeepaliveTimeout.
// Clients may ping every KeepaliveMinPing at most, with or without calls.
const (
	MaxConnectionIdle = 5 * time.Minute
	KeepaliveTime     = time.Minute
	KeepaliveTimeout  = 20 * time.Second
	KeepaliveMinPing  = 10 * time.Second
)

// ServerOptions are the grpc.Server options that serve l: creds wrapped so
// that the listener learns when a connection is past its handshake (they
// replace any earlier grpc.Creds option), grpc's own handshake deadline
// set to HandshakeTimeout, and the keepalive above.
func (l *Listener) ServerOptions(creds credentials.TransportCredentials) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(&serverCreds{TransportCredentials: creds}),
		grpc.ConnectionTimeout(l.cfg.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: MaxConnectionIdle, Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinPing, PermitWithoutStream: true}),
	}
}

// serverCreds are a server's transport credentials whose handshake hands
// the server a connection that establishes the listener's once the HTTP/2
// preface has come through (after TLS, decrypted: so only a client that
// completed the handshake gets there).
type serverCreds struct {
	credentials.TransportCredentials
}

func (s *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := s.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return c, info, err
	}
	if lc, ok := raw.(*conn); ok {
		return &prefaceConn{Conn: c, raw: lc}, info, nil
	}
	return c, info, nil
}

func (s *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: s.TransportCredentials.Clone()}
}
