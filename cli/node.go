package cli

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	shoalv1 "shoal/api/shoal/v1"
)

func (a *app) nodeCmd() *cli.Command {
	return &cli.Command{
		Name:        "node",
		Usage:       "run a shoal node, and list, cordon, drain and remove the cluster's nodes",
		Before:      func(*cli.Context) error { a.kind = "node"; return nil },
		Subcommands: []*cli.Command{a.nodeList(), a.nodeGet(), a.nodeCordon(true), a.nodeCordon(false), a.nodeDrain(), a.nodeRemove()},
	}
}

func (a *app) nodeList() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the cluster's nodes",
		Description: `STATUS is Ready while the node holds its liveness lease (--node-ttl), NotReady
after it expired (the node is remembered); Cordoned nodes take no new sandboxes.
EngineUnavailable: the node's Docker engine has not answered for --engine-grace;
placement skips it and its sandboxes are UNKNOWN until the engine is back
(` + "`shoal node get NAME -o yaml`" + ` shows since when and why).
CORRUPT: a registry record of the node in etcd does not decode; a warning line
on stderr names its key, and ` + "`shoal node remove NAME`" + ` removes it.
SANDBOXES is placed/capacity.`,
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 0, "")
			if err != nil {
				return err
			}
			resp, err := api.ListNodes(c.Context, &shoalv1.ListNodesRequest{})
			if err != nil {
				return err
			}
			return a.out.nodeList(resp.Items)
		},
	}
}

func (a *app) nodeGet() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "show one node",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			n, err := api.GetNode(c.Context, &shoalv1.GetNodeRequest{Name: c.Args().First()})
			if err != nil {
				return err
			}
			return a.out.node(n)
		},
	}
}

func (a *app) nodeCordon(cordon bool) *cli.Command {
	name, usage := "cordon", "stop placing new sandboxes on a node (its sandboxes keep running)"
	if !cordon {
		name, usage = "uncordon", "let a cordoned node take new sandboxes again"
	}
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			n, err := api.CordonNode(c.Context, &shoalv1.CordonNodeRequest{Name: c.Args().First(), Cordon: cordon})
			if err != nil {
				return err
			}
			return a.out.node(n)
		},
	}
}

func (a *app) nodeDrain() *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Usage:     "cordon a node and wait until it holds no sandboxes",
		ArgsUsage: "NAME",
		Description: `Cordons the node (no new sandboxes are placed on it), then waits until no
sandbox is on it. Without --delete something else must delete them (sandboxes
are never moved: they hold local state); with --delete drain requests the
deletion of each. A sandbox of a NotReady node is deleted once the node's
fence time has passed. Exits 5 if --timeout passes first, naming what is left.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "delete", Usage: "delete the node's sandboxes"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "give up waiting after `DURATION`"},
		},
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			name := c.Args().First()
			ctx, cancel := a.timeoutCtx(c)
			defer cancel()
			stop := a.progress(fmt.Sprintf("draining node %s", name))
			resp, err := api.DrainNode(ctx, &shoalv1.DrainNodeRequest{Name: name, Delete: c.Bool("delete")})
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for err == nil && len(resp.Sandboxes) > 0 {
				select {
				case <-ctx.Done():
					err = ctx.Err()
				case <-tick.C:
					// Keep the last answer: a call cut short by the
					// timeout has none, and the message names what is left.
					var next *shoalv1.DrainNodeResponse
					if next, err = api.DrainNode(ctx, &shoalv1.DrainNodeRequest{Name: name}); err == nil {
						resp = next
					}
				}
			}
			stop("")
			if err != nil {
				if ctx.Err() != nil && c.Context.Err() == nil && resp != nil {
					hint := "delete them, or drain with --delete"
					if c.Bool("delete") {
						hint = "their deletion is under way; `shoal sandbox get` shows each one's phase"
					}
					return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("node %s still holds %d sandbox(es) after %s: %s; %s",
						name, len(resp.Sandboxes), c.Duration("timeout"), list(resp.Sandboxes), hint)}
				}
				return err
			}
			if a.out.format == formatJSON || a.out.format == formatYAML {
				return a.out.object(resp)
			}
			fmt.Fprintf(a.stdout, "node %s drained\n", name)
			return nil
		},
	}
}

func (a *app) nodeRemove() *cli.Command {
	return &cli.Command{
		Name:      "remove",
		Usage:     "forget a NotReady node, deleting its sandboxes",
		ArgsUsage: "NAME",
		Description: `Forgets a node that is NotReady (its liveness lease expired: the host is dead
or gone). Its sandboxes are deleted once the node's fence time (lease expiry
plus the leader's --fence-margin) has passed, and the node leaves ` + "`node list`" + `
when none is left. A Ready node is refused: stop it first, or drain it. If the
node comes back before that, it is kept and removes those sandboxes' containers
itself. A CORRUPT node (its registry record does not decode) is removed the
same way: a corrupt registry key at once, a corrupt info record once no sandbox
names the node.`,
		Action: func(c *cli.Context) error {
			api, err := a.clusterArgs(c, 1, "NAME")
			if err != nil {
				return err
			}
			name := c.Args().First()
			resp, err := api.RemoveNode(c.Context, &shoalv1.RemoveNodeRequest{Name: name})
			if err != nil {
				return err
			}
			if a.out.format == formatJSON || a.out.format == formatYAML {
				return a.out.object(resp)
			}
			if len(resp.Sandboxes) == 0 {
				fmt.Fprintf(a.stdout, "node %s removing: the leader forgets it in a moment\n", name)
			} else {
				fmt.Fprintf(a.stdout, "node %s removing: deleting %d sandbox(es): %s\n", name, len(resp.Sandboxes), list(resp.Sandboxes))
			}
			return nil
		},
	}
}
