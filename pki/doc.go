// Package pki makes and loads the certificates of a shoal cluster's mutual
// TLS (`shoal certs init`), and says which role a peer's certificate
// carries.
//
// # Layout
//
// One directory holds everything `shoal certs init --dir DIR` writes:
//
//	ca.crt, ca.key              the cluster's certificate authority
//	<node>.crt, <node>.key      one per node: server and client use, for
//	                            the API, node-to-node forwarding and the
//	                            embedded etcd's client and peer URLs
//	admin.crt, admin.key        client certificates, one per role
//	operator.crt, operator.key
//	viewer.crt, viewer.key
//
// Keys are ECDSA P-256, PEM, written 0600; certificates 0644. A node's
// certificate names the node (CN), carries the organization "node", and is
// valid for the node's advertise host names and IPs, localhost and
// 127.0.0.1. A client certificate's organization is its role (Role).
//
// Running init again with the same directory keeps the CA and signs only
// what is missing, so adding a node later is `shoal certs init --dir DIR
// --nodes n4`; an existing certificate is replaced only with --force.
//
// A node starts only on a node certificate whose CN is its node id
// (CheckNode). Transport.Probe (probe.go) tells a peer whose certificates
// do not fit this side's (another CA, a refused certificate) from one that
// is only unreachable, which gRPC and etcd's client report alike.
package pki
