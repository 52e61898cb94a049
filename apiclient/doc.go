// Package apiclient is the client side of the shoal API over several nodes
// of one cluster (the CLI's --endpoint list, the chaos suite's clients): a
// connection per node, and failover that moves a call to the next node only
// when sending it again cannot do anything twice (conn.go).
package apiclient
