package cli

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

func parseType(s string) (shoalv1.ProviderType, error) {
	v, ok := shoalv1.ProviderType_value[strings.ToUpper(s)]
	if !ok || v == 0 {
		return 0, usageError("--type: %q is not one of nvidia, openai, anthropic, github, generic", s)
	}
	return shoalv1.ProviderType(v), nil
}

func (a *app) providerCmd() *cli.Command {
	return &cli.Command{
		Name:    "provider",
		Aliases: []string{"providers"},
		Usage:   "manage credential providers",
		Before:  func(*cli.Context) error { a.kind = "provider"; return nil },
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a provider",
				ArgsUsage: "NAME",
				Description: `Creates a named set of credentials. Attached sandboxes get each credential
as an environment variable. Credentials are never shown again.

  read -rs NVIDIA_API_KEY && export NVIDIA_API_KEY    # paste the key; not echoed
  shoal provider create nvidia --type nvidia --credential-from-env NVIDIA_API_KEY
  shoal provider create gh --type github --credential-file ~/.config/shoal/gh.env
  some-vault-tool export nvidia | shoal provider create nvidia --type nvidia --credential-file -

` + credentialsHelp,
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "type", Required: true, Usage: "`TYPE`: nvidia, openai, anthropic, github or generic (any case; get and list show it in capitals, as the API has it)"},
					&cli.StringSliceFlag{Name: "config", Usage: "plain `KEY=VALUE`, repeatable"},
					&cli.StringSliceFlag{Name: "label", Usage: "`KEY=VALUE` label, repeatable"},
				}, credentialFlags("")...),
				Action: func(c *cli.Context) error {
					if err := exactArgs(c, 1, "NAME"); err != nil {
						return err
					}
					typ, err := parseType(c.String("type"))
					if err != nil {
						return err
					}
					creds, err := a.credentials(c)
					if err != nil {
						return err
					}
					conf, err := parseKV("--config", c.StringSlice("config"))
					if err != nil {
						return err
					}
					labels, err := parseKV("--label", c.StringSlice("label"))
					if err != nil {
						return err
					}
					api, err := a.api()
					if err != nil {
						return err
					}
					p, err := api.CreateProvider(c.Context, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
						Meta: &shoalv1.ObjectMeta{Name: c.Args().First(), Workspace: a.workspace, Labels: labels},
						Type: typ, Credentials: creds, Config: conf,
					}})
					if err != nil {
						return err
					}
					return a.out.provider(p)
				},
			},
			{
				Name:      "get",
				Usage:     "show a provider (credentials redacted)",
				ArgsUsage: "NAME",
				Action: func(c *cli.Context) error {
					api, err := a.dialArgs(c, 1, "NAME")
					if err != nil {
						return err
					}
					p, err := api.GetProvider(c.Context, &shoalv1.GetProviderRequest{Workspace: a.workspace, Name: c.Args().First()})
					if err != nil {
						return err
					}
					return a.out.provider(p)
				},
			},
			{
				Name:  "list",
				Usage: "list providers",
				Description: `-o json|yaml always prints {"items": [...]}, also for zero or one provider.
Warnings of the server (say, a corrupt record it skipped) go to stderr.`,
				Action: func(c *cli.Context) error {
					api, err := a.dialArgs(c, 0, "no arguments")
					if err != nil {
						return err
					}
					all, warnings, err := allPages(func(tok string) (listPage[*shoalv1.Provider], error) {
						resp, err := api.ListProviders(c.Context, &shoalv1.ListProvidersRequest{Workspace: a.workspace, PageToken: tok, PageSize: shoal.MaxPageSize})
						return listPage[*shoalv1.Provider]{resp.GetItems(), resp.GetWarnings(), resp.GetNextPageToken()}, err
					})
					a.out.warnings(warnings)
					if err != nil {
						return err
					}
					return a.out.providerList(all)
				},
			},
			{
				Name:      "update",
				Usage:     "replace a provider's credentials, config or labels",
				ArgsUsage: "NAME",
				Description: `Each given kind of flag replaces that whole map: any credential flag
replaces all credentials with the ones given. Sandboxes that run see the new
values within seconds as files, /run/shoal/providers/NAME/KEY; their
environment keeps the values they started with until they are started again
(shoal sandbox restart), which gives them the new ones.

  shoal provider update nvidia --credential-from-env NVIDIA_API_KEY

` + credentialsHelp,
				Flags: append([]cli.Flag{
					&cli.StringSliceFlag{Name: "config", Usage: "plain `KEY=VALUE`, repeatable; replaces all config"},
					&cli.StringSliceFlag{Name: "label", Usage: "`KEY=VALUE`, repeatable; replaces all labels"},
					&cli.Int64Flag{Name: "if-version", Usage: "apply only at this resource `VERSION`"},
				}, credentialFlags("; replaces all credentials")...),
				Action: func(c *cli.Context) error {
					if err := exactArgs(c, 1, "NAME"); err != nil {
						return err
					}
					if !credentialsSet(c) && !c.IsSet("config") && !c.IsSet("label") {
						return usageError("provider update: give at least one of --credential-from-env, --credential-file, --credential, --config, --label")
					}
					creds, err := a.credentials(c)
					if err != nil {
						return err
					}
					conf, err := parseKV("--config", c.StringSlice("config"))
					if err != nil {
						return err
					}
					labels, err := parseKV("--label", c.StringSlice("label"))
					if err != nil {
						return err
					}
					api, err := a.api()
					if err != nil {
						return err
					}
					p, err := api.UpdateProvider(c.Context, &shoalv1.UpdateProviderRequest{
						Provider:          &shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: c.Args().First(), Workspace: a.workspace, Labels: labels}, Credentials: creds, Config: conf},
						UpdateCredentials: credentialsSet(c), UpdateConfig: c.IsSet("config"), UpdateLabels: c.IsSet("label"),
						ResourceVersion: c.Int64("if-version"),
					})
					if err != nil {
						return err
					}
					return a.out.provider(p)
				},
			},
			{
				Name:      "delete",
				Usage:     "delete providers",
				ArgsUsage: "NAME...",
				Description: `Fails while a live sandbox uses the provider, naming those sandboxes.
If only sandboxes that are being deleted hold it, it becomes Terminating and is
removed when they are gone; --wait returns then.

` + multiNameHelp,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "wait", Usage: "return when the provider is gone"},
					&cli.BoolFlag{Name: "ignore-not-found", Usage: "succeed if the provider does not exist"},
					&cli.DurationFlag{Name: "timeout", Value: 5 * 60e9, Usage: "give up waiting after `DURATION`"},
				},
				Action: func(c *cli.Context) error {
					return a.forEachName(c, "provider", func(api shoalv1.ShoalClient, name string) error {
						ctx, cancel := a.timeoutCtx(c)
						defer cancel()
						var stop func(string)
						if c.Bool("wait") {
							stop = a.progress(fmt.Sprintf("deleting provider %s", name))
						}
						resp, err := api.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Workspace: a.workspace, Name: name, Wait: c.Bool("wait")})
						if stop != nil {
							stop("")
						}
						if err != nil {
							if c.Bool("ignore-not-found") && a.classify(err).code == ExitNotFound {
								return nil
							}
							return err
						}
						if resp.Deleted {
							fmt.Fprintf(a.stdout, "provider %s deleted\n", name)
						} else {
							fmt.Fprintf(a.stdout, "provider %s terminating (sandboxes being deleted still hold it)\n", name)
						}
						return nil
					})
				},
			},
		},
	}
}
