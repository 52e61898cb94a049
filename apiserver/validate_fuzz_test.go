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
