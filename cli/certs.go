package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"shoal/pki"
)

func (a *app) certsCmd() *cli.Command {
	return &cli.Command{
		Name:  "certs",
		Usage: "make the certificates of a cluster's mutual TLS",
		Subcommands: []*cli.Command{{
			Name:      "init",
			Usage:     "write a CA, a certificate per node and one per role (admin, operator, viewer)",
			ArgsUsage: " ",
			Description: `Writes into --dir, with Go's crypto/x509 (ECDSA P-256; keys 0600):

  ca.crt, ca.key                the cluster's CA (made once; kept if present)
  <node>.crt, <node>.key        per node of --nodes: server and client use, valid
                                for the node id, localhost, 127.0.0.1 and --hosts
  admin.crt, operator.crt,      client certificates (with their keys); the
  viewer.crt                    certificate's organization is its role

Running it again with the same --dir keeps the CA and every file already there
and signs only what is missing: add a node with --nodes n4. --force re-signs the
node and client certificates (never the CA).

Start a node with --tls-cert DIR/n1.crt --tls-key DIR/n1.key --tls-ca DIR/ca.crt.

Example:
  shoal certs init --dir ./pki --nodes n1,n2,n3 --hosts n1=10.0.0.11,n2=10.0.0.12,n3=10.0.0.13`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Usage: "`DIR` to write to (made 0700 if absent)", Required: true},
				&cli.StringFlag{Name: "nodes", Usage: "comma-separated node `IDS` to sign certificates for", Required: true},
				&cli.StringFlag{Name: "hosts", Usage: "comma-separated extra host names or IPs the node certificates are valid for: `NODE=HOST` for one node, HOST for all"},
				&cli.IntFlag{Name: "days", Value: 365, Usage: "validity of the certificates signed now, in `DAYS` (the CA: ten times as long)"},
				&cli.BoolFlag{Name: "force", Usage: "re-sign node and client certificates that exist"},
			},
			Action: func(c *cli.Context) error {
				if err := exactArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				if c.Int("days") <= 0 {
					return usageError("--days: %d is not a positive number of days", c.Int("days"))
				}
				w, err := pki.Init(pki.InitOptions{
					Dir: c.String("dir"), Nodes: splitList(c.String("nodes")), Hosts: splitList(c.String("hosts")),
					Validity: time.Duration(c.Int("days")) * 24 * time.Hour, Force: c.Bool("force"),
				})
				if err != nil {
					return usageError("%v", err)
				}
				for _, f := range w.Created {
					fmt.Fprintf(a.stdout, "wrote %s\n", f)
				}
				if len(w.Kept) > 0 {
					fmt.Fprintf(a.stdout, "kept %d existing files (--force re-signs node and client certificates)\n", len(w.Kept))
				}
				return nil
			},
		}},
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
