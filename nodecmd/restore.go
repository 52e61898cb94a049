package nodecmd

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	shoalcli "shoal/cli"
	"shoal/embedetcd"
	"shoal/etcdmember"
	"shoal/node"
)

// restore is `shoal cluster snapshot restore`: it writes a data dir with
// etcd's own restore, which links the etcd server.
func restore(t *shoalcli.Tool) *cli.Command {
	def := node.DefaultConfig()
	return &cli.Command{
		Name:      "restore",
		Usage:     "write a node's data dir from an etcd snapshot",
		ArgsUsage: "FILE",
		Description: `Writes DIR/etcd from a snapshot with etcd's own restore (etcdutl), for
` + "`shoal node start --data-dir DIR --node-id ID`" + ` to start on. Runs locally; no node
is contacted. The restored member keeps every key; revisions move on by 10^9
(etcd's advice), so nothing a client saw before reads as newer.

One node: restore, then start that node. Several voters: restore the same
snapshot on each with the same --etcd-initial-cluster, each with its own
--node-id, then start them all with that list.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Required: true, Usage: "the node's data `DIR` to write (its etcd subdirectory must not exist)"},
			&cli.StringFlag{Name: "node-id", Value: def.ID, EnvVars: []string{"SHOAL_NODE_ID"}, Usage: "`ID` of the node that will start on it (the member's name)"},
			&cli.StringFlag{Name: "etcd-initial-cluster", Usage: "the restored cluster, `NAME=URL,...` (default: ID=" + def.EtcdListenPeer + ")"},
		},
		Action: func(c *cli.Context) error {
			if err := shoalcli.ExactArgs(c, 1, "FILE"); err != nil {
				return err
			}
			file, dir, id := c.Args().First(), c.String("data-dir"), c.String("node-id")
			if err := etcdmember.CheckName(id); err != nil {
				return shoalcli.UsageError("--node-id: %v", err)
			}
			ic := c.String("etcd-initial-cluster")
			if ic == "" {
				ic = id + "=" + def.EtcdListenPeer
			}
			parsed, err := etcdmember.ParseInitialCluster(ic)
			if err != nil {
				return shoalcli.UsageError("--etcd-initial-cluster: %v", err)
			}
			if len(parsed.URLs(id)) == 0 {
				return shoalcli.UsageError("--etcd-initial-cluster: the node id %q is not in %q (the member's name is its node id)", id, ic)
			}
			if _, err := os.Stat(file); err != nil {
				return shoalcli.UsageError("snapshot file: %v", err)
			}
			if entries, err := os.ReadDir(node.EtcdDir(dir)); err == nil && len(entries) > 0 {
				return shoalcli.Exit(shoalcli.ExitPrecondition, fmt.Sprintf("--data-dir: %s is not empty; restore into a fresh data dir", node.EtcdDir(dir)),
					"a node's data is replaced only by hand: move the old directory away first")
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return shoalcli.Failure("--data-dir: %v", err)
			}
			err = embedetcd.Restore(embedetcd.RestoreConfig{Snapshot: file, DataDir: node.EtcdDir(dir), Name: id, InitialCluster: ic})
			if err != nil {
				return shoalcli.Failure("%v", err)
			}
			etcdDir, _ := filepath.Abs(node.EtcdDir(dir))
			if t.Structured() {
				return t.PrintFields(map[string]any{"data_dir": dir, "etcd_dir": etcdDir, "node_id": id})
			}
			fmt.Fprintf(t.Stdout(), "etcd snapshot restored into %s as member %s\nStart the node with:\n  shoal node start --data-dir %s --node-id %s ...\n", etcdDir, id, dir, id)
			return nil
		},
	}
}
