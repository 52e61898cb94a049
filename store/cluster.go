package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	clientv3 "go.etcd.io/etcd/client/v3"

	"shoal"
)

// ClusterID returns the id of the cluster this keyspace belongs to, making
// it on first use. Every node of one cluster reads the same value; two
// clusters (two etcds, or two prefixes) never share one. Container labels
// carry it, so nodes of separate clusters on one Docker engine leave each
// other's containers alone.
func (s *Store) ClusterID(ctx context.Context) (string, error) {
	b, err := s.once(ctx, s.k.clusterID(), 8)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// PageTokenSecret returns the cluster's secret for signing page tokens,
// making it on first use.
func (s *Store) PageTokenSecret(ctx context.Context) ([]byte, error) {
	b, err := s.once(ctx, s.k.pageTokenSecret(), 32)
	if err != nil {
		return nil, err
	}
	return hex.DecodeString(string(b))
}

// once reads key, or creates it with n random bytes (hex-encoded) if it is
// absent. The Txn compares CreateRevision(key) == 0, so concurrent first
// callers agree on one value: the loser's Else branch reads the winner's.
func (s *Store) once(ctx context.Context, key string, n int) ([]byte, error) {
	raw := make([]byte, n)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	val := hex.EncodeToString(raw)
	resp, err := s.txn(ctx, "make once", key, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, val)}, []clientv3.Op{clientv3.OpGet(key)})
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return []byte(val), nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 || len(kvs[0].Value) != 2*n {
		return nil, shoal.DataLoss("%s holds no valid value; remove it with etcdctl del %s and restart", key, key)
	}
	if _, err := hex.DecodeString(string(kvs[0].Value)); err != nil {
		return nil, shoal.DataLoss("%s holds no valid value; remove it with etcdctl del %s and restart", key, key)
	}
	return kvs[0].Value, nil
}
