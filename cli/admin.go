package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/encryption"
	"shoal/pki"
)

func (a *app) adminCmd() *cli.Command {
	return &cli.Command{
		Name:  "admin",
		Usage: "encryption keys of provider credentials at rest",
		Description: `Provider credentials are encrypted in etcd with AES-256-GCM under the key ring
of --encryption-key-file (every node needs the same file). To rotate:

  1. shoal admin new-encryption-key --file keys.yaml --name k2
     (adds a new key and makes it current; the old ones stay, to read with)
  2. copy keys.yaml to every node and restart them one at a time
  3. shoal admin rotate-encryption-key
     (re-encrypts every provider under k2; run it again if it stopped)
  4. once it reports no failure, the old key may be removed from the file`,
		Subcommands: []*cli.Command{{
			Name:      "new-encryption-key",
			Usage:     "write a key file with a new random key, or add one to an existing file and make it current",
			ArgsUsage: " ",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "file", Required: true, Usage: "key ring `FILE` to write (mode 0600)"},
				&cli.StringFlag{Name: "name", Value: "k1", Usage: "`NAME` of the new key"},
			},
			Action: func(c *cli.Context) error {
				if err := exactArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				path := c.String("file")
				existing, err := os.ReadFile(path)
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return usageError("--file: %v", err)
				}
				if len(existing) > 0 {
					if _, err := encryption.Load(path); err != nil {
						return usageError("%v", err)
					}
				}
				data, err := encryption.NewKeyFile(existing, c.String("name"))
				if err != nil {
					return usageError("%v", err)
				}
				if err := pki.WriteFile(path, data, 0o600); err != nil {
					return err
				}
				verb := "wrote"
				if len(existing) > 0 {
					verb = "added to"
				}
				fmt.Fprintf(a.stdout, "%s %s: key %q, now current\n", verb, path, c.String("name"))
				return nil
			},
		}, {
			Name:      "rotate-encryption-key",
			Usage:     "re-encrypt every provider's credentials under the current key of the serving node",
			ArgsUsage: " ",
			Description: `Each provider is rewritten through the update loop, so concurrent writes are
safe; one already under the current key is left alone, so running the command
again finishes a rotation that stopped. Credentials stored in plaintext (before
the cluster had a key file) are encrypted too. Only this workspace with
--workspace; all of them by default. Provider records that do not decode
(corrupt in etcd) are skipped and named, each with how to delete it. Exit code
1 if any provider failed or was skipped.`,
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "all-workspaces", Value: true, Usage: "every workspace (--all-workspaces=false: only --workspace)"},
			},
			Action: func(c *cli.Context) error {
				api, err := a.clusterArgs(c, 0, "no arguments")
				if err != nil {
					return err
				}
				req := &shoalv1.RotateEncryptionKeyRequest{}
				if !c.Bool("all-workspaces") {
					req.Workspace = a.workspace
				}
				resp, err := api.RotateEncryptionKey(c.Context, req)
				if err != nil {
					return err
				}
				if a.out.format != formatTable {
					return a.out.object(resp)
				}
				fmt.Fprintf(a.stdout, "key %s: %d providers re-encrypted, %d already under it, %d failed", resp.Key, resp.Rewritten, resp.Current, len(resp.Failed))
				if len(resp.Skipped) > 0 {
					fmt.Fprintf(a.stdout, ", %d corrupt skipped", len(resp.Skipped))
				}
				fmt.Fprintln(a.stdout)
				for _, f := range resp.Failed {
					fmt.Fprintf(a.stderr, "failed: %s\n", f)
				}
				for _, s := range resp.Skipped {
					fmt.Fprintf(a.stderr, "skipped: %s\n", s)
				}
				switch {
				case len(resp.Failed) > 0:
					return &exitError{code: ExitError, msg: fmt.Sprintf("%d providers were not re-encrypted", len(resp.Failed)+len(resp.Skipped)),
						hint: "fix what the lines above say (often: a node without the old key), then run the command again"}
				case len(resp.Skipped) > 0:
					return &exitError{code: ExitError, msg: fmt.Sprintf("%d corrupt provider records were skipped", len(resp.Skipped)),
						hint: "nothing can re-encrypt a record that does not decode: delete each as its line says"}
				}
				return nil
			},
		}},
	}
}
