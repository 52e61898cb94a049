package cli

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestReorder(t *testing.T) {
	a := &app{}
	root := a.tree(shoalSpec())
	for _, tc := range []struct{ in, want string }{
		{"shoal sandbox create sb1 --provider p --wait", "shoal sandbox create --provider p --wait -- sb1"},
		{"shoal sandbox create sb1 --provider=p -- sh -c --x", "shoal sandbox create --provider=p -- sb1 sh -c --x"},
		{"shoal sandbox create --image img sb1 --env A=1 -- echo hi", "shoal sandbox create --image img --env A=1 -- sb1 echo hi"},
		{"shoal sandbox delete a b --wait -o json", "shoal -o json sandbox delete --wait -- a b"},
		{"shoal --endpoint x:1 sandbox exec sb -- env", "shoal --endpoint x:1 sandbox exec -- sb env"},
		{"shoal sandbox label sb team=ml tier- --if-version 3", "shoal sandbox label --if-version 3 -- sb team=ml tier-"},
		{"shoal provider create p --type nvidia --credential K=V", "shoal provider create --type nvidia --credential K=V -- p"},
		{"shoal sandbox list", "shoal sandbox list"},
		{"shoal sandbox", "shoal sandbox"},
		{"shoal sandbox --help", "shoal sandbox --help"},
		{"shoal -o json cluster member -h", "shoal -o json cluster member -h"},
		{"shoal sandbox create sb1 --help", "shoal sandbox create --help"},
		{"shoal sandbox delete sb1 --wait -h", "shoal sandbox delete --help"},
		{"shoal -o json sandbox get sb1 --help", "shoal -o json sandbox get --help"},
		{"shoal sandbox exec sb1 -- sh --help", "shoal sandbox exec -- sb1 sh --help"},
		{"shoal sandbox --help create", "shoal sandbox create --help"},
		{"shoal sandbox get sb --bogus", "shoal sandbox get --bogus -- sb"},
		{"shoal provider create p --credential-file - --type nvidia", "shoal provider create --credential-file - --type nvidia -- p"},
		{"shoal provider update p --credential-from-env K --credential-file=f", "shoal provider update --credential-from-env K --credential-file=f -- p"},
		// egress has subcommands and an action of its own (show).
		{"shoal sandbox egress sb -o yaml", "shoal -o yaml sandbox egress -- sb"},
		{"shoal sandbox egress -o json sb", "shoal -o json sandbox egress -- sb"},
		{"shoal sandbox egress --help", "shoal sandbox egress --help"},
		{"shoal sandbox egress show sb -o json", "shoal -o json sandbox egress show -- sb"},
		{"shoal sandbox egress set sb a.com:80,443 --mode audit --if-version 3 --wait", "shoal sandbox egress set --mode audit --if-version 3 --wait -- sb a.com:80,443"},
		{"shoal sandbox egress add sb --cut-connections *.x.io", "shoal sandbox egress add --cut-connections -- sb *.x.io"},
		{"shoal sandbox egress set sb -f - --none", "shoal sandbox egress set -f - --none -- sb"},
		{"shoal sandbox create sb --egress-allow a.com:80,443 --egress-allow b.io --egress-file p.yaml", "shoal sandbox create --egress-allow a.com:80,443 --egress-allow b.io --egress-file p.yaml -- sb"},
		{"shoal sandbox logs sb --egress -f", "shoal sandbox logs --egress -f -- sb"},
	} {
		got := strings.Join(Reorder(root, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("Reorder(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"shoal", "sandbox", "get"},
		{"shoal", "sandbox", "get", "a", "b"},
		{"shoal", "-o", "xml", "sandbox", "list"},
		{"shoal", "provider", "create", "p", "--type", "nvidia", "--credential", "NOEQUALS"},
		{"shoal", "provider", "create", "p", "--type", "bogus"},
		{"shoal", "sandbox", "get", "sb", "--bogus"},
		{"shoal", "sandbox", "create", "sb", "--egress-allow", "*.*.com"},
		{"shoal", "sandbox", "create", "sb", "--egress-mode", "permissive"},
		{"shoal", "sandbox", "egress", "add", "sb", "host:0"},
		{"shoal", "sandbox", "egress", "add", "sb"},
		{"shoal", "sandbox", "egress", "mode", "sb", "bogus"},
		{"shoal", "sandbox", "egress", "set", "sb"},
		{"shoal", "sandbox", "egress", "set", "sb", "--none", "a.io"},
		{"shoal", "sandbox", "egress"},
		{"shoal", "sandbox", "logs", "sb", "--egress", "--tail", "-3"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, strings.NewReader(""), &out, &errb)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, ExitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), "Error:") {
			t.Errorf("%v: no error message: %q", args, errb.String())
		}
	}
}

func TestParseKV(t *testing.T) {
	m, err := parseKV("--env", []string{"A=1", "B=x=y", "C="})
	if err != nil || !reflect.DeepEqual(m, map[string]string{"A": "1", "B": "x=y", "C": ""}) {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := parseKV("--env", []string{"=1"}); err == nil || !strings.Contains(err.Error(), "--env") {
		t.Fatalf("empty key: %v", err)
	}
}

func FuzzReorder(f *testing.F) {
	f.Add("shoal sandbox create sb --wait -- a b")
	f.Add("shoal -o json provider delete --wait=true x")
	root := (&app{}).tree(shoalSpec())
	f.Fuzz(func(t *testing.T, s string) {
		in := strings.Fields(s)
		out := Reorder(root, in)
		if len(in) > 0 && len(out) < len(in) {
			t.Fatalf("Reorder dropped arguments: %q -> %q", in, out)
		}
	})
}

// An interrupted multi-name command stops starting new work and says which
// names it did not try.
func TestForEachNameInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, []string{"shoal", "--endpoint", "127.0.0.1:1", "sandbox", "delete", "a", "b"}, strings.NewReader(""), &out, &errb)
	if code != ExitError || !strings.Contains(errb.String(), "interrupted; not tried: a b") || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
