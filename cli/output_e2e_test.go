package cli_test

import (
	"context"
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
