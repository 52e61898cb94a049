package embedetcd

import (
	"fmt"
	"os"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"shoal/etcdmember"
)

// RestoreConfig says where a snapshot becomes a member's data dir.
type RestoreConfig struct {
	// Snapshot is the file an etcd snapshot was saved to (with the
	// checksum etcd appends, which Restore verifies).
	Snapshot string
	// DataDir is the member's data dir to write; it must not exist or
	// be empty.
	DataDir string
	// Name is the member's name (the node id).
	Name string
	// InitialCluster is the restored cluster's membership (etcd's
	// --initial-cluster); it must name Name.
	InitialCluster string
}

// RevisionBump is how far a restore moves the revision on (etcd's own
// advice for restores): revisions stay monotonic for every client that
// saw one from after the snapshot, and the old ones read as compacted, so
// a watch resumed from one is told so instead of silently missing events.
const RevisionBump = 1_000_000_000

// Restore writes a data dir from a snapshot with etcd's own restore
// (etcdutl), as `etcdutl snapshot restore` does.
func Restore(cfg RestoreConfig) error {
	if err := etcdmember.CheckName(cfg.Name); err != nil {
		return fmt.Errorf("node-id: %w", err)
	}
	ic, err := etcdmember.ParseInitialCluster(cfg.InitialCluster)
	if err != nil {
		return fmt.Errorf("etcd-initial-cluster: %w", err)
	}
	own := ic.URLs(cfg.Name)
	if len(own) == 0 {
		return fmt.Errorf("etcd-initial-cluster: the member name %q is not in %q", cfg.Name, cfg.InitialCluster)
	}
	if _, err := os.Stat(cfg.Snapshot); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if Initialized(cfg.DataDir) {
		return fmt.Errorf("data-dir: %s holds an etcd member already; restore into a fresh directory", cfg.DataDir)
	}
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        cfg.Snapshot,
		Name:                cfg.Name,
		OutputDataDir:       cfg.DataDir,
		PeerURLs:            own,
		InitialCluster:      ic.String(),
		InitialClusterToken: initialClusterToken,
		RevisionBump:        RevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		return fmt.Errorf("restore %s into %s: %w", cfg.Snapshot, cfg.DataDir, err)
	}
	return nil
}
