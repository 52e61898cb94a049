package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"shoal/pki"
)

// The client's config file: named contexts (endpoints, workspace,
// certificate paths) and the current one, as kubeconfig has them. Flags
// and environment variables override the context's values field by field.

// clientConfig is the file's content.
type clientConfig struct {
	CurrentContext string          `json:"current-context,omitempty"`
	Contexts       []clientContext `json:"contexts"`
}

// clientContext is one named way to reach a cluster.
type clientContext struct {
	Name      string `json:"name"`
	Endpoint  string `json:"endpoint"`
	Workspace string `json:"workspace,omitempty"`
	TLSCert   string `json:"tls-cert,omitempty"`
	TLSKey    string `json:"tls-key,omitempty"`
	TLSCA     string `json:"tls-ca,omitempty"`
}

func (c *clientConfig) find(name string) *clientContext {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

// defaultConfigPath is $XDG_CONFIG_HOME/shoal/config.yaml, or
// ~/.config/shoal/config.yaml.
func defaultConfigPath() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "shoal", "config.yaml")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".config", "shoal", "config.yaml")
	}
	return ""
}

// loadConfig reads the file; a missing file is an empty config.
func loadConfig(path string) (*clientConfig, error) {
	cfg := &clientConfig{}
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, usageError("--config %s: %v", path, err)
	}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, usageError("--config %s: not a shoal config file: %v", path, err)
	}
	for i, c := range cfg.Contexts {
		if c.Name == "" {
			return nil, usageError("--config %s: context %d has no name", path, i+1)
		}
		if cfg.find(c.Name) != &cfg.Contexts[i] {
			return nil, usageError("--config %s: context %q is given twice", path, c.Name)
		}
	}
	return cfg, nil
}

func saveConfig(path string, cfg *clientConfig) error {
	if path == "" {
		return usageError("--config: no config file (no home directory); give --config FILE")
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// applyContext fills the connection settings: a flag or environment
// variable first, then the context (--context, or the file's current one),
// then the defaults.
func (a *app) applyContext(c *cli.Context) error {
	a.configPath = c.String("config")
	cfg, err := loadConfig(a.configPath)
	if err != nil {
		return err
	}
	a.config = cfg
	name := cfg.CurrentContext
	if c.IsSet("context") {
		name = c.String("context")
	}
	var cur clientContext
	if name != "" {
		found := cfg.find(name)
		if found == nil {
			if c.IsSet("context") {
				return usageError("--context: no context %q in %s; `shoal config get-contexts` lists them", name, a.configPath)
			}
			// Not fatal here: `shoal config use-context` and the other
			// config commands must still run to repair it. A call to a
			// node refuses (api).
			a.contextErr = usageError("%s: its current-context %q is not one of its contexts; `shoal config use-context NAME` picks another (or give --context)", a.configPath, name)
		} else {
			cur = *found
		}
	}
	pick := func(flag, fromContext string) string {
		if c.IsSet(flag) || fromContext == "" {
			return c.String(flag)
		}
		return fromContext
	}
	a.endpoint = pick("endpoint", cur.Endpoint)
	a.workspace = pick("workspace", cur.Workspace)
	a.tls = pki.Files{Cert: pick("tls-cert", cur.TLSCert), Key: pick("tls-key", cur.TLSKey), CA: pick("tls-ca", cur.TLSCA)}
	if err := a.tls.Validate("--tls"); err != nil {
		return usageError("%v", err)
	}
	return nil
}

func (a *app) configCmd() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "named contexts: which cluster to talk to, in which workspace, with which certificate",
		Description: `The config file (--config, SHOAL_CONFIG; default ~/.config/shoal/config.yaml,
written 0600) holds contexts like kubeconfig's. The current context supplies
--endpoint, --workspace and --tls-cert/--tls-key/--tls-ca; a flag or its
environment variable overrides it field by field, and --context (SHOAL_CONTEXT)
picks another context for one command.

Example:
  shoal config set-context prod --endpoint 10.0.0.1:7443,10.0.0.2:7443 \
      --tls-cert pki/admin.crt --tls-key pki/admin.key --tls-ca pki/ca.crt
  shoal config use-context prod
  shoal sandbox list`,
		Subcommands: []*cli.Command{a.configSetContext(), a.configUseContext(), a.configGetContexts(), a.configDeleteContext(), a.configView()},
	}
}

func (a *app) configSetContext() *cli.Command {
	return &cli.Command{
		Name:      "set-context",
		Usage:     "add a context, or change the fields given of an existing one",
		ArgsUsage: "NAME",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "endpoint", Usage: "API `ADDRESSES` of the cluster's nodes, comma-separated"},
			&cli.StringFlag{Name: "workspace", Usage: "`WORKSPACE` of the objects"},
			&cli.StringFlag{Name: "tls-cert", Usage: "client certificate `FILE` (its organization is the role: admin, operator or viewer)"},
			&cli.StringFlag{Name: "tls-key", Usage: "the key `FILE` of --tls-cert"},
			&cli.StringFlag{Name: "tls-ca", Usage: "the cluster CA's certificate `FILE`"},
			&cli.BoolFlag{Name: "use", Usage: "make it the current context too"},
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 1, "NAME"); err != nil {
				return err
			}
			name := c.Args().First()
			if !validContextName(name) {
				return usageError("NAME: %q is not a context name (letters, digits, '.', '_' and '-')", name)
			}
			ctx := a.config.find(name)
			if ctx == nil {
				a.config.Contexts = append(a.config.Contexts, clientContext{Name: name})
				ctx = &a.config.Contexts[len(a.config.Contexts)-1]
			}
			for flag, field := range map[string]*string{"endpoint": &ctx.Endpoint, "workspace": &ctx.Workspace, "tls-cert": &ctx.TLSCert, "tls-key": &ctx.TLSKey, "tls-ca": &ctx.TLSCA} {
				if c.IsSet(flag) {
					v := c.String(flag)
					if strings.HasPrefix(flag, "tls-") && v != "" {
						abs, err := filepath.Abs(v)
						if err != nil {
							return usageError("--%s: %v", flag, err)
						}
						v = abs // the context works from any directory
					}
					*field = v
				}
			}
			if ctx.Endpoint == "" {
				return usageError("--endpoint: a new context needs the cluster's API addresses")
			}
			if err := (pki.Files{Cert: ctx.TLSCert, Key: ctx.TLSKey, CA: ctx.TLSCA}).Validate("--tls"); err != nil {
				return usageError("%v", err)
			}
			if c.Bool("use") {
				a.config.CurrentContext = name
			}
			if err := saveConfig(a.configPath, a.config); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "context %q set in %s\n", name, a.configPath)
			return nil
		},
	}
}

func validContextName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func (a *app) configUseContext() *cli.Command {
	return &cli.Command{
		Name:      "use-context",
		Usage:     "make a context the current one",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 1, "NAME"); err != nil {
				return err
			}
			name := c.Args().First()
			if a.config.find(name) == nil {
				return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no context %q in %s", name, a.configPath), hint: "`shoal config get-contexts` lists them; `shoal config set-context` adds one"}
			}
			a.config.CurrentContext = name
			if err := saveConfig(a.configPath, a.config); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "switched to context %q\n", name)
			return nil
		},
	}
}

func (a *app) configDeleteContext() *cli.Command {
	return &cli.Command{
		Name:      "delete-context",
		Usage:     "remove a context",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 1, "NAME"); err != nil {
				return err
			}
			name := c.Args().First()
			i := slices.IndexFunc(a.config.Contexts, func(x clientContext) bool { return x.Name == name })
			if i < 0 {
				return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no context %q in %s", name, a.configPath), hint: "`shoal config get-contexts` lists them"}
			}
			a.config.Contexts = slices.Delete(a.config.Contexts, i, i+1)
			if a.config.CurrentContext == name {
				a.config.CurrentContext = ""
			}
			if err := saveConfig(a.configPath, a.config); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "context %q deleted\n", name)
			return nil
		},
	}
}

func (a *app) configGetContexts() *cli.Command {
	return &cli.Command{
		Name:  "get-contexts",
		Usage: "list the contexts (* marks the current one)",
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			if a.out.format != formatTable {
				return a.out.structured(a.config.Contexts)
			}
			rows := [][]string{}
			for _, x := range a.config.Contexts {
				cur := ""
				if x.Name == a.config.CurrentContext {
					cur = "*"
				}
				auth := "plaintext"
				if x.TLSCert != "" {
					auth = "mTLS " + filepath.Base(x.TLSCert)
				}
				rows = append(rows, []string{cur, x.Name, x.Endpoint, orDash(x.Workspace), auth})
			}
			return a.out.table([]string{"CURRENT", "NAME", "ENDPOINT", "WORKSPACE", "AUTH"}, rows)
		},
	}
}

func (a *app) configView() *cli.Command {
	return &cli.Command{
		Name:  "view",
		Usage: "print the config file (YAML; -o json for JSON)",
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			if a.out.format == formatJSON {
				return a.out.structured(a.config)
			}
			data, err := yaml.Marshal(a.config)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "# %s\n%s", a.configPath, data)
			return nil
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
