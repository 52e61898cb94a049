package store

import (
	"context"
	"errors"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// KeyEvent is a change of one of the plain keys the leader follows (not a
// record): a node's registry key, or a teardown record. A terminal event
// carries Err and is the last one on its channel.
type KeyEvent struct {
	// Name is the key below its prefix: a node id, or "<ws>/<name>".
	Name    string
	Value   string
	Deleted bool
	Err     error
}

// WatchNodeKeys streams changes of the node registry keys from now on: a
// Deleted event is a node whose lease expired or that stopped.
func (s *Store) WatchNodeKeys(ctx context.Context) <-chan KeyEvent {
	return s.watchKeys(ctx, s.k.prefix+"/nodes/")
}

// WatchTeardowns streams teardown records from now on (deletion.go, step
// 2): Name is "<ws>/<name>" and Value the uid.
func (s *Store) WatchTeardowns(ctx context.Context) <-chan KeyEvent {
	return s.watchKeys(ctx, s.k.prefix+"/torndown/")
}

// TeardownName splits a KeyEvent.Name of WatchTeardowns.
func TeardownName(name string) (ws, sandbox string) {
	ws, sandbox, _ = strings.Cut(name, "/")
	return ws, sandbox
}

// watchKeys watches a prefix from the current revision. The channel closes
// when ctx ends, or after a terminal error event.
func (s *Store) watchKeys(ctx context.Context, prefix string) <-chan KeyEvent {
	out := make(chan KeyEvent, 64)
	go func() {
		defer close(out)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		for resp := range s.c.Watch(wctx, prefix, clientv3.WithPrefix()) {
			if err := resp.Err(); err != nil {
				select {
				case out <- KeyEvent{Err: etcdErr(ctx, err)}:
				case <-ctx.Done():
				}
				return
			}
			for _, ev := range resp.Events {
				e := KeyEvent{Name: strings.TrimPrefix(string(ev.Kv.Key), prefix), Value: string(ev.Kv.Value),
					Deleted: ev.Type == clientv3.EventTypeDelete}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
		if ctx.Err() == nil {
			select {
			case out <- KeyEvent{Err: errors.New("watch ended")}:
			case <-ctx.Done():
			}
		}
	}()
	return out
}
