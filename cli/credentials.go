package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"shoal"
)

// Credentials reach a provider three ways. --credential K=V is the
// simplest and the worst: the value lands in shell history and, while
// shoal runs, in /proc/PID/cmdline, which every user of the machine can
// read (ps). --credential-file and --credential-from-env keep values off
// the command line. No error about a credential ever shows its value: a
// key may be named, a file and line number may be named, nothing more.

const credentialsHelp = `Give credentials with --credential-from-env or --credential-file: a value given
with --credential lands in your shell history and, while shoal runs, in its
command line, which every user of the machine can read (ps).

  --credential-from-env KEY   the value of environment variable KEY; repeatable
  --credential-file FILE      KEY=VALUE lines; FILE "-" reads standard input.
                              Blank lines and lines starting with # are
                              ignored; the value is the rest of the line after
                              the first "=", taken literally (no quotes, no
                              "export"). Repeatable.
  --credential KEY=VALUE      on the command line; avoid for real secrets

The three combine; each key may be given only once. Errors name the key,
file or line, never a value.`

// credentialFlags are the flags of provider create and update that carry
// credentials. extra is appended to each usage line.
func credentialFlags(extra string) []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "credential-from-env", Value: &rawList{}, Usage: "secret from environment variable `KEY`, repeatable (preferred)" + extra},
		&cli.GenericFlag{Name: "credential-file", Value: &rawList{}, Usage: "secrets from KEY=VALUE lines in `FILE` (- for stdin), repeatable (preferred)" + extra},
		&cli.GenericFlag{Name: "credential", Value: &rawList{}, Usage: "secret `KEY=VALUE`, repeatable; visible in shell history and ps, prefer the two above" + extra},
	}
}

// rawList is a repeatable flag whose values are kept exactly as given.
// urfave/cli's StringSliceFlag splits each value at commas and trims
// spaces, which would corrupt a secret such as K=a,b and then report the
// piece after the comma, that is part of the secret, as a bad argument.
type rawList []string

func (l *rawList) Set(v string) error { *l = append(*l, v); return nil }

// String is what --help shows as the default: never a value.
func (l *rawList) String() string { return "" }

func rawValues(c *cli.Context, name string) []string {
	if l, ok := c.Generic(name).(*rawList); ok && l != nil {
		return *l
	}
	return nil
}

// credentialsSet reports whether the command was given any credential flag.
func credentialsSet(c *cli.Context) bool {
	return c.IsSet("credential") || c.IsSet("credential-file") || c.IsSet("credential-from-env")
}

// credential is one KEY=VALUE and where it came from, so that errors can
// name the source instead of the value.
type credential struct{ key, val, from string }

// credentials merges the three credential flags into one map. A key given
// twice, in any combination of flags, is a usage error.
func (a *app) credentials(c *cli.Context) (map[string]string, error) {
	var all []credential
	for i, v := range rawValues(c, "credential") {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, usageError("--credential (occurrence %d): not KEY=VALUE (the argument is not shown: it may be a secret)", i+1)
		}
		all = append(all, credential{k, val, "--credential"})
	}
	stdinRead := false
	for _, f := range rawValues(c, "credential-file") {
		if f == "-" {
			if stdinRead {
				return nil, usageError("--credential-file - is given twice; standard input can be read only once")
			}
			stdinRead = true
		}
		creds, err := a.readCredentialFile(f)
		if err != nil {
			return nil, err
		}
		all = append(all, creds...)
	}
	for _, k := range rawValues(c, "credential-from-env") {
		if strings.Contains(k, "=") {
			// Probably KEY=VALUE given by mistake: do not echo it.
			return nil, usageError("--credential-from-env takes the NAME of an environment variable, not KEY=VALUE (the argument is not shown: it may be a secret)")
		}
		if k == "" {
			return nil, usageError("--credential-from-env: the variable name is empty")
		}
		v, ok := a.lookupEnv(k)
		if !ok {
			return nil, usageError("--credential-from-env %s: environment variable %s is not set; export it first, or run `%s=... shoal ...`", k, k, k)
		}
		all = append(all, credential{k, v, "--credential-from-env " + k})
	}
	m := make(map[string]string, len(all))
	from := make(map[string]string, len(all))
	for _, cr := range all {
		if !utf8.ValidString(cr.val) {
			// gRPC cannot carry it (proto strings are UTF-8); say so
			// here rather than as an INTERNAL marshaling error.
			return nil, usageError("credential %s (%s): the value is not valid UTF-8; encode binary secrets (base64, hex) first", cr.key, cr.from)
		}
		if prev, dup := from[cr.key]; dup {
			return nil, usageError("credential %s is given twice (%s and %s); give each key once", cr.key, prev, cr.from)
		}
		m[cr.key], from[cr.key] = cr.val, cr.from
	}
	return m, nil
}

// readCredentialFile reads KEY=VALUE lines from name ("-": standard input).
func (a *app) readCredentialFile(name string) ([]credential, error) {
	var r io.Reader
	display := name
	if name == "-" {
		r, display = a.stdin, "- (standard input)"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, usageError("--credential-file: %v", err)
		}
		defer f.Close()
		r = f
	}
	// More than one request can carry is an error, not a truncation.
	const limit = shoal.MaxRequestBytes
	lr := &io.LimitedReader{R: r, N: limit + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 4096), limit+1)
	var out []credential
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r") // files written on Windows
		trimmed := strings.TrimLeft(text, " \t")
		if strings.TrimSpace(trimmed) == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		k, v, ok := strings.Cut(trimmed, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, usageError("--credential-file %s line %d: not KEY=VALUE (the line is not shown: it may hold a secret; no spaces around \"=\", no \"export\")", display, line)
		}
		if strings.Trim(v, "=") == "" {
			// "KEY=" or a bare base64 token ("dG9r...==") pasted without
			// its name: the secret would become a key, shown in every
			// response. Neither is a credential anyone means to store.
			return nil, usageError("--credential-file %s line %d: the value is empty, or the line is a bare token without KEY= (the line is not shown: it may hold a secret)", display, line)
		}
		out = append(out, credential{k, v, fmt.Sprintf("--credential-file %s line %d", display, line)})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, usageError("--credential-file %s line %d: longer than %d bytes", display, line+1, limit)
		}
		return nil, usageError("--credential-file %s: %v", display, err)
	}
	if lr.N <= 0 {
		return nil, usageError("--credential-file %s: larger than %d bytes, more than one request can carry", display, limit)
	}
	if len(out) == 0 {
		// An empty stdin (a failed pipe upstream) must not become a
		// provider without credentials, or an update that drops them all.
		return nil, usageError("--credential-file %s holds no KEY=VALUE lines", display)
	}
	return out, nil
}
