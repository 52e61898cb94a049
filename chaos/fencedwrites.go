package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Invariant 7 (and 10, the same across hosts): no write by a fenced-out
// leader was applied. Every node's coordinator logs each leader-only write
// it applied with its fencing token and commit revision ("fence_key",
// "fence_rev", "commit_rev", in JSON logs: --log-format json); the check
// reads the leader key at that exact revision from etcd's history and
// requires that it existed with that create revision. With a cluster, the
// logs of every node are read: any of them may have led.

// CheckFencedWrites checks the fenced writes logged in every file of logs
// that committed after revision from (0: all), through cli (a client no
// fault touches). It returns the violations and how many writes it
// checked; err is for a check that could not be carried out (a log that
// cannot be read, etcd that does not answer, a revision compacted away).
func CheckFencedWrites(ctx context.Context, cli *clientv3.Client, scn string, logs []string, from int64) ([]Violation, int, error) {
	var writes []fencedWrite
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		ws, err := readFencedWrites(f, from)
		f.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", path, err)
		}
		writes = append(writes, ws...)
	}
	// Each write must have committed while its leader key existed with
	// the create revision the write carried: read the key at the write's
	// own revision.
	var v []Violation
	for _, w := range writes {
		resp, err := cli.Get(ctx, w.FenceKey, clientv3.WithRev(w.CommitRev))
		if err != nil {
			return nil, 0, fmt.Errorf("leader key at rev %d: %w", w.CommitRev, err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != w.FenceRev {
			v = append(v, Violation{invFencing, scn, fmt.Sprintf("%s %s committed at rev %d with fence %s@%d, outside that leader's term", w.Msg, w.Name, w.CommitRev, w.FenceKey, w.FenceRev)})
		}
	}
	return v, len(writes), nil
}

// readFencedWrites reads the fenced-write lines of a JSON log that
// committed after revision from.
func readFencedWrites(r io.Reader, from int64) ([]fencedWrite, error) {
	var writes []fencedWrite
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var w fencedWrite
		if json.Unmarshal(sc.Bytes(), &w) == nil && w.FenceKey != "" && w.CommitRev > from {
			writes = append(writes, w)
		}
	}
	return writes, sc.Err()
}
