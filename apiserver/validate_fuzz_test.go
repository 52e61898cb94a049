package apiserver

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
)

// The request validators, fuzzed: whatever a client sends, a validator
// returns nil or a typed INVALID_ARGUMENT error that names a field, and
// never panics. (go test runs the seeds; go test -fuzz=FuzzX explores.)

// invalid checks a validator's answer.
func invalid(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var e *shoal.Error
	if shoal.KindOf(err) != shoal.KindInvalid || !asError(err, &e) || e.Field == "" {
		t.Fatalf("a refusal that is not INVALID_ARGUMENT naming a field: %#v", err)
	}
}

func asError(err error, e **shoal.Error) bool { return errors.As(err, e) }

func seedMessages(f *testing.F, msgs ...proto.Message) {
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x03, 'a', 'b', 'c'})
}

func FuzzValidateSandbox(f *testing.F) {
	seedMessages(f,
		&shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}}, Spec: &shoalv1.SandboxSpec{
			Image: "shoal/sandbox:dev", Command: []string{"sh", "-c", "true"}, Env: map[string]string{"A": "1"}, Providers: []string{"p"},
			Resources: &shoalv1.Resources{CpuMillis: 500, MemoryBytes: 1 << 20}, NodeSelector: map[string]string{"zone": "a"}}},
		&shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: strings.Repeat("x", 300)}},
		&shoalv1.Sandbox{Meta: &shoalv1.ObjectMeta{Name: "a"}, Spec: &shoalv1.SandboxSpec{Env: map[string]string{"A=B": "\x00"}}},
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		var sb shoalv1.Sandbox
		if proto.Unmarshal(b, &sb) != nil {
			return
		}
		invalid(t, validateSandbox(&sb))
	})
}

func FuzzValidateProvider(f *testing.F) {
	seedMessages(f,
		&shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "nv"}, Type: shoalv1.ProviderType_NVIDIA, Credentials: map[string]string{"NVIDIA_API_KEY": "x"}, Config: map[string]string{"a": "b"}},
		&shoalv1.Provider{Meta: &shoalv1.ObjectMeta{Name: "nv"}, Type: 99},
		&shoalv1.Provider{Credentials: map[string]string{"": "\x00"}},
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p shoalv1.Provider
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		invalid(t, validateProvider(&p, true))
		invalid(t, validateProvider(&p, false))
	})
}

func FuzzValidateRefAndFields(f *testing.F) {
	for _, s := range [][2]string{{"default", "a"}, {"", ""}, {"ws", "a/b"}, {"WS", "x\x00"}, {strings.Repeat("w", 70), "n"}, {"a", "-b"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ws, name string) {
		invalid(t, validateRef(ws, name))
		invalid(t, validLabels("labels", map[string]string{ws: name}))
		invalid(t, validAnnotations("annotations", map[string]string{ws: name}))
		invalid(t, validEnvMap("env", map[string]string{ws: name}, 8))
		invalid(t, validImage("image", name))
		invalid(t, validCommand("command", []string{ws, name}))
		invalid(t, validProviders("providers", []string{ws, name}))
	})
}

// The checks the handlers make of their own fields: a create's request
// id, a logs request's tail, a new etcd member's name and peer URLs.
func FuzzValidateHandlerFields(f *testing.F) {
	for _, s := range []struct {
		id, name, peer string
		tail           int32
	}{
		{"6f1c2f9e-3b0a-4c1e-9d2a-0a1b2c3d4e5f", "n4", "https://10.0.0.4:2380", 10},
		{"", "", "", 0},
		{strings.Repeat("r", 65), "N4", "http://[::1]:2380", -1},
		{"a\nb", "n 4", "ftp://x", 1 << 30},
		{"\xff", "n4", "https://host:99999", 0},
		{"x", "n=4", "http://a:1", 0},
		{"y", "n4", "http://a:1,n5=http://b:2", 0},
	} {
		f.Add(s.id, s.name, s.peer, s.tail)
	}
	f.Fuzz(func(t *testing.T, id, name, peer string, tail int32) {
		invalid(t, validRequestID(id))
		invalid(t, validTailLines(tail))
		invalid(t, validNodeName(name))
		peers, err := validNewMember(name, []string{peer})
		invalid(t, err)
		if err == nil && (len(peers) != 1 || peers[0] == "" || strings.Contains(peer, ",")) {
			t.Fatalf("member %q %q accepted as %q", name, peer, peers)
		}
		if _, err := validNewMember(name, []string{peer, peer}); err == nil {
			t.Fatalf("member %q: the same peer URL twice accepted", name)
		}
		if err := validRequestID(id); err == nil && len(id) > 64 {
			t.Fatalf("request id of %d bytes accepted", len(id))
		}
		if err := validTailLines(tail); (err == nil) != (tail >= 0) {
			t.Fatalf("tail_lines %d: %v", tail, err)
		}
	})
}
