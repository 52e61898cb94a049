package cli_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	shoalv1 "shoal/api/shoal/v1"
	"shoal/internal/testenv"
)

func (f *fakeShoal) GetProvider(context.Context, *shoalv1.GetProviderRequest) (*shoalv1.Provider, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.items[0], nil
}

// JSON and YAML print strings as they are: no HTML escaping of <, > and &
// (`<redacted>` once came out as `\u003credacted\u003e` in lists).
func TestJSONNotHTMLEscapedThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	f := &fakeShoal{}
	ep := startFake(t, f)
	f.set(func(f *fakeShoal) {
		f.items = []*shoalv1.Provider{{Meta: &shoalv1.ObjectMeta{Name: "p", Labels: map[string]string{"team": "a&b"}},
			Type: shoalv1.ProviderType_GITHUB, Credentials: map[string]string{"GITHUB_TOKEN": "<redacted>"},
			Config: map[string]string{"url": "https://example.com/?a=1&b=<2>"}}}
	})
	for _, args := range [][]string{{"-o", "json", "provider", "list"}, {"-o", "json", "provider", "get", "p"}, {"-o", "yaml", "provider", "list"}} {
		what := strings.Join(args, " ")
		r := run(t, bin, ep, args...).must(t, 0, what)
		for _, want := range []string{"<redacted>", "https://example.com/?a=1&b=<2>", "a&b"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s: stdout lacks %q:\n%s", what, want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, `\u00`) {
			t.Errorf("%s: escaped characters in:\n%s", what, r.stdout)
		}
	}
}

// A provider's type reads the same in every format: the API's enum name
// (the table once printed "github" where JSON and YAML print "GITHUB").
func TestProviderTypeSameInEveryFormatThroughBinary(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	f := &fakeShoal{}
	ep := startFake(t, f)
	f.set(func(f *fakeShoal) {
		f.items = []*shoalv1.Provider{{Meta: &shoalv1.ObjectMeta{Name: "p"}, Type: shoalv1.ProviderType_GITHUB}}
	})
	for _, cmd := range [][]string{{"provider", "list"}, {"provider", "get", "p"}} {
		var types []string
		for _, format := range []string{"table", "json", "yaml"} {
			what := strings.Join(cmd, " ") + " -o " + format
			r := run(t, bin, ep, append([]string{"-o", format}, cmd...)...).must(t, 0, what)
			var typ string
			switch format {
			case "table":
				lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
				if len(lines) != 2 || strings.Fields(lines[0])[1] != "TYPE" {
					t.Fatalf("%s: want a header with TYPE second and one row:\n%s", what, r.stdout)
				}
				typ = strings.Fields(lines[1])[1]
			case "json", "yaml":
				re := map[string]*regexp.Regexp{"json": regexp.MustCompile(`"type": "([^"]*)"`), "yaml": regexp.MustCompile(`(?m)^\s*-?\s*type: (\S+)$`)}[format]
				m := re.FindStringSubmatch(r.stdout)
				if m == nil {
					t.Fatalf("%s: no type in:\n%s", what, r.stdout)
				}
				typ = m[1]
			}
			types = append(types, typ)
		}
		if types[0] != "GITHUB" || types[1] != "GITHUB" || types[2] != "GITHUB" {
			t.Errorf("%s: type as table, json, yaml: %q, want GITHUB in each", strings.Join(cmd, " "), types)
		}
	}
}
