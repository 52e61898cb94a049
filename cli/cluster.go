package cli

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/etcdmember"
)

// memberHint points a member name that was not found at the member list.
func memberHint(err error) error {
	if status.Code(err) == codes.NotFound {
		return &exitError{code: ExitNotFound, msg: status.Convert(err).Message(), hint: "`shoal cluster member list` shows the members"}
	}
	return err
}

func (a *app) clusterCmd() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "the etcd cluster under shoal: status, members, snapshots",
		Description: `Any node answers for the whole cluster (--endpoint picks the node).
The etcd member of a node is named after its node id.`,
		Subcommands: []*cli.Command{
			a.clusterStatus(),
			{
				Name:        "member",
				Aliases:     []string{"members"},
				Usage:       "list, add, remove or promote etcd members",
				Subcommands: []*cli.Command{a.memberList(), a.memberAdd(), a.memberRemove(), a.memberPromote()},
			},
			{
				Name:        "snapshot",
				Usage:       "save an etcd snapshot, or restore a data dir from one",
				Subcommands: []*cli.Command{a.snapshotSave()},
			},
		},
	}
}

func (a *app) clusterStatus() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show every etcd member's health and shoal's leader",
		Description: `Asks each member for its own status (2s each): raft term and index, db size,
and whether it sees a leader. shoal's leader is the node that drives teardown;
its fencing token is the create revision of its election key, which every
leader-only write compares.`,
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 0, "no arguments")
			if err != nil {
				return err
			}
			st, err := api.Status(c.Context, &shoalv1.ClusterStatusRequest{})
			if err != nil {
				return err
			}
			if a.out.format != formatTable {
				return a.out.object(st)
			}
			rows := make([][]string, 0, len(st.Members))
			for _, m := range st.Members {
				health := "true"
				if !m.Healthy {
					health = "false: " + m.Error
				}
				term, index, size := "-", "-", "-"
				if m.RaftTerm != 0 { // the member answered
					term, index, size = fmt.Sprint(m.RaftTerm), fmt.Sprint(m.RaftIndex), bytesSize(m.DbSize)
				}
				rows = append(rows, []string{memberName(m), m.Id, list(m.PeerUrls), list(m.ClientUrls), fmt.Sprint(m.Leader), fmt.Sprint(m.Learner),
					term, index, size, health})
			}
			if err := a.out.objects(itemList, []string{"name", "id", "peer urls", "client urls", "leader", "learner", "raft term", "raft index", "db size", "healthy"}, rows); err != nil {
				return err
			}
			if st.LeaderNode == "" {
				fmt.Fprintf(a.stdout, "\nshoal leader: none known (no node holds the leader lease, or etcd could not say)\n")
			} else {
				since := "unknown"
				if st.LeaderSince != nil {
					since = fmt.Sprintf("%s (%s ago)", st.LeaderSince.AsTime().Local().Format("2006-01-02 15:04:05"), a.out.age(st.LeaderSince))
				}
				synced := "not yet"
				if st.LeaderSynced != nil && st.LeaderSince != nil {
					synced = fmt.Sprintf("%s after it won", st.LeaderSynced.AsTime().Sub(st.LeaderSince.AsTime()).Round(time.Millisecond))
				}
				fmt.Fprintf(a.stdout, "\nshoal leader: %s   fencing token: %d   since: %s   first resync: %s\n", st.LeaderNode, st.FencingToken, since, synced)
			}
			if st.ClusterId == "" {
				st.ClusterId = "unknown (etcd has no quorum?)"
			}
			fmt.Fprintf(a.stdout, "cluster id: %s\n", st.ClusterId)
			return nil
		},
	}
}

func (a *app) memberList() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the etcd members",
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 0, "no arguments")
			if err != nil {
				return err
			}
			resp, err := api.ListMembers(c.Context, &shoalv1.ListMembersRequest{})
			if err != nil {
				return err
			}
			return a.printMembers(resp.Members)
		},
	}
}

func (a *app) printMembers(ms []*shoalv1.Member) error {
	rows := make([][]string, 0, len(ms))
	msgs := make([]proto.Message, 0, len(ms))
	for _, m := range ms {
		rows = append(rows, []string{memberName(m), m.Id, list(m.PeerUrls), list(m.ClientUrls), fmt.Sprint(m.Learner)})
		msgs = append(msgs, m)
	}
	return a.out.objects(itemList, []string{"name", "id", "peer urls", "client urls", "learner"}, rows, msgs...)
}

// memberName shows an unstarted member (added, not joined yet) as such.
func memberName(m *shoalv1.Member) string {
	if m.Name == "" {
		return "<unstarted>"
	}
	return m.Name
}

func (a *app) memberAdd() *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add an etcd member (a learner unless --voter)",
		ArgsUsage: "NAME",
		Description: `Adds a member to the etcd cluster and prints the --etcd-initial-cluster it must
start with. NAME is the node id of the node that will run it. Usually
` + "`shoal node start --join ADDRESS`" + ` does this, and the promotion, itself.

A learner replicates without voting; promote it once it has caught up
(` + "`shoal cluster member promote NAME`" + `). --voter adds a voter at once, which
raises the quorum before the member is even running.`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "peer-url", Required: true, Usage: "the member's peer `URL` (its --etcd-advertise-peer), repeatable"},
			&cli.BoolFlag{Name: "voter", Usage: "add a voting member instead of a learner"},
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 1, "NAME"); err != nil {
				return err
			}
			name := c.Args().First()
			for _, u := range c.StringSlice("peer-url") {
				if err := etcdmember.CheckURL("--peer-url", u); err != nil {
					return usageError("%v", err)
				}
			}
			api, err := a.clusterAPI()
			if err != nil {
				return err
			}
			resp, err := api.AddMember(c.Context, &shoalv1.AddMemberRequest{Name: name, PeerUrls: c.StringSlice("peer-url"), Voter: c.Bool("voter")})
			if err != nil {
				return err
			}
			if a.out.format != formatTable {
				return a.out.object(resp)
			}
			if err := a.printMembers([]*shoalv1.Member{resp.Member}); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "\ninitial cluster: %s\n\nStart the member with:\n  shoal node start --node-id %s --etcd-advertise-peer %s --etcd-initial-cluster-state existing --etcd-initial-cluster '%s' ...\n",
				resp.InitialCluster, name, list(resp.Member.GetPeerUrls()), resp.InitialCluster)
			if resp.Member.GetLearner() {
				fmt.Fprintf(a.stdout, "then, once it has caught up:\n  shoal cluster member promote %s\n", name)
			}
			return nil
		},
	}
}

func (a *app) memberRemove() *cli.Command {
	return &cli.Command{
		Name:      "remove",
		Usage:     "remove an etcd member",
		ArgsUsage: "NAME",
		Description: `NAME is the member's name (its node's id) or its hex id. The node whose member
is removed stops: its data dir cannot start again (remove it and start with
--join to come back). The last voting member cannot be removed.`,
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			resp, err := api.RemoveMember(c.Context, &shoalv1.RemoveMemberRequest{Name: c.Args().First()})
			if err != nil {
				return memberHint(err)
			}
			if a.out.format == formatTable {
				fmt.Fprintf(a.stdout, "etcd member %s removed\n\n", c.Args().First())
			}
			return a.printMembers(resp.Members)
		},
	}
}

func (a *app) memberPromote() *cli.Command {
	return &cli.Command{
		Name:      "promote",
		Usage:     "make a learner a voting member",
		ArgsUsage: "NAME",
		Description: `etcd promotes a learner only once it has caught up with the leader; the node
retries until then, for up to 30s, and otherwise fails with exit 5 (retry
later). Promoting a voter changes nothing.`,
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			resp, err := api.PromoteMember(c.Context, &shoalv1.PromoteMemberRequest{Name: c.Args().First()})
			if err != nil {
				return memberHint(err)
			}
			if a.out.format == formatTable {
				fmt.Fprintf(a.stdout, "etcd member %s is a voter\n\n", c.Args().First())
			}
			return a.printMembers(resp.Members)
		},
	}
}

func (a *app) snapshotSave() *cli.Command {
	return &cli.Command{
		Name:      "save",
		Usage:     "save an etcd snapshot to FILE",
		ArgsUsage: "FILE",
		Description: `Streams a snapshot of the etcd member of the node at --endpoint, checks the
checksum etcd appends, and only then puts it at FILE (replacing it).`,
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 1, "FILE"); err != nil {
				return err
			}
			file := c.Args().First()
			api, err := a.clusterAPI()
			if err != nil {
				return err
			}
			n, err := a.saveSnapshot(c, api, file)
			if err != nil {
				return err
			}
			if a.out.format != formatTable {
				return a.out.object(mustStruct(map[string]any{"file": file, "bytes": n}))
			}
			fmt.Fprintf(a.stdout, "etcd snapshot saved to %s (%s)\n", file, bytesSize(n))
			return nil
		},
	}
}

// saveSnapshot writes the stream to FILE.part, checks etcd's checksum,
// syncs, and renames: FILE is never a partial snapshot.
func (a *app) saveSnapshot(c *cli.Context, api shoalv1.ClusterClient, file string) (int64, error) {
	stream, err := api.Snapshot(c.Context, &shoalv1.SnapshotRequest{})
	if err != nil {
		return 0, err
	}
	part := file + ".part"
	f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, &exitError{code: ExitError, msg: err.Error()}
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(part)
		}
	}()
	sum := &tailHash{h: sha256.New()}
	w := io.MultiWriter(f, sum)
	var n int64
	err = recvAll(c.Context, stream.Recv, func(ch *shoalv1.SnapshotChunk) error {
		m, err := w.Write(ch.Data)
		n += int64(m)
		return err
	})
	if err != nil {
		return 0, err
	}
	if c.Context.Err() != nil {
		return 0, &exitError{code: ExitError, msg: "interrupted; no snapshot saved"}
	}
	if !sum.ok() {
		return 0, &exitError{code: ExitUnavailable, msg: fmt.Sprintf("the snapshot stream (%d bytes) does not end with its checksum: it was cut or damaged; nothing saved", n),
			hint: "run the command again"}
	}
	if err := f.Sync(); err != nil {
		return 0, &exitError{code: ExitError, msg: err.Error()}
	}
	if err := f.Close(); err != nil {
		return 0, &exitError{code: ExitError, msg: err.Error()}
	}
	if err := os.Rename(part, file); err != nil {
		return 0, &exitError{code: ExitError, msg: err.Error()}
	}
	ok = true
	return n, nil
}

// tailHash hashes everything written to it but the last sha256.Size
// bytes, which it keeps: etcd ends a snapshot with the sha256 of the rest.
type tailHash struct {
	h    hash.Hash
	tail []byte
}

func (t *tailHash) Write(p []byte) (int, error) {
	all := append(t.tail, p...)
	if cut := len(all) - sha256.Size; cut > 0 {
		t.h.Write(all[:cut])
		all = all[cut:]
	}
	t.tail = append([]byte(nil), all...)
	return len(p), nil
}

func (t *tailHash) ok() bool {
	return len(t.tail) == sha256.Size && bytes.Equal(t.h.Sum(nil), t.tail)
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err) // only plain values are passed in
	}
	return s
}

// bytesSize is a byte count for people.
func bytesSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
