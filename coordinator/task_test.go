package coordinator

import "testing"

// Every kind names itself, and tasks of different kinds for the same name
// never share a queue key (one would swallow the other).
func TestTaskKinds(t *testing.T) {
	names := map[string]kind{}
	keys := map[string]kind{}
	for k := removeSandbox; k <= repair; k++ {
		s := k.String()
		if prev, dup := names[s]; dup || s == "" || s[0] == 'k' {
			t.Fatalf("kind %d is named %q (as kind %d)", int(k), s, int(prev))
		}
		names[s] = k
		key := task{kind: k, ws: "default", name: "x", uid: "u"}.key()
		if prev, dup := keys[key]; dup {
			t.Fatalf("kinds %v and %v share the queue key %q", prev, k, key)
		}
		keys[key] = k
	}
	if got := kind(99).String(); got != "kind(99)" {
		t.Fatalf("unknown kind: %q", got)
	}
}
