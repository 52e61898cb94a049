package apiserver

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/distribution/reference"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/etcdmember"
	"shoal/store"
)

// Limits on requests. Each is part of one size budget: an object the API
// accepts, with the largest labels and status it can later gain, always
// encodes below store.MaxStoredBytes, so every transaction the store builds
// for it fits etcd's request limit (store/limits.go) and it can always be
// updated, labelled and deleted. TestLimitsFitTheStoreBudget checks the sum.
const (
	MaxNameLen    = 63
	MaxProviders  = store.MaxProvidersPerSandbox
	MaxEnv        = 128
	MaxEnvValue   = 8 << 10
	MaxLabels     = 64
	MaxLabelValue = 63
	// MaxAnnotationSize bounds the encoded annotations of an object.
	MaxAnnotationSize = 64 << 10
	// MaxSpecBytes bounds a sandbox's encoded spec (image, command, env,
	// providers, resources), and a provider's encoded credentials and
	// config together.
	MaxSpecBytes = 256 << 10
	// MaxStatusBytes is what the status of a sandbox may grow to (the
	// agent bounds status.message; conditions are a fixed few).
	MaxStatusBytes = 16 << 10
	MaxCredentials = 64
	MaxCommandArgs = 256
	MaxArgLen      = 8 << 10
	MaxImageLen    = 255
	MaxPageSize    = shoal.MaxPageSize
)

// The message and resource bounds a client needs as well
// (MaxRequestBytes, MaxResponseBytes, MaxCPUMillis, MinCPUMillis,
// MaxMemoryBytes) are the root package's: shoal/limits.go.

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	labelName    = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelValue   = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func validName(field, name string) error {
	if name == "" {
		return shoal.Invalid(field, "is required")
	}
	if len(name) > MaxNameLen {
		return shoal.Invalid(field, "%q is %d characters; at most %d are allowed", trunc(name), len(name), MaxNameLen)
	}
	if !dns1123Label.MatchString(name) {
		return shoal.Invalid(field, "%q is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)", trunc(name))
	}
	return nil
}

// validWorkspace accepts "" (the default workspace).
func validWorkspace(field, ws string) error {
	if ws == "" {
		return nil
	}
	return validName(field, ws)
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// validLabelKey accepts Kubernetes-style keys: [dns-subdomain/]name.
func validLabelKey(field, k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)) {
		return shoal.Invalid(field, "key %q: the prefix must be a DNS subdomain", trunc(k))
	}
	if name == "" || len(name) > 63 || !labelName.MatchString(name) {
		return shoal.Invalid(field, "key %q: the name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", trunc(k))
	}
	return nil
}

func validLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return shoal.Invalid(field, "%d labels; at most %d are allowed", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if err := validLabelKey(field, k); err != nil {
			return err
		}
		if len(v) > MaxLabelValue || !labelValue.MatchString(v) {
			return shoal.Invalid(fmt.Sprintf("%s[%s]", field, k), "value %q must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", trunc(v))
		}
	}
	return nil
}

func validAnnotations(field string, ann map[string]string) error {
	for k, v := range ann {
		if err := validLabelKey(field, k); err != nil {
			return err
		}
		if err := validText(fmt.Sprintf("%s[%s]", field, k), v, true); err != nil {
			return err
		}
	}
	if size := proto.Size(&shoalv1.ObjectMeta{Annotations: ann}); size > MaxAnnotationSize {
		return shoal.Invalid(field, "annotations take %d bytes encoded; at most %d are allowed", size, MaxAnnotationSize)
	}
	return nil
}

// validText accepts valid UTF-8 without NUL (which neither Docker nor a C
// string can carry); multiline allows tab, CR and LF and refuses every
// other control character, otherwise all of them are refused.
func validText(field, v string, multiline bool) error {
	if !utf8.ValidString(v) {
		return shoal.Invalid(field, "is not valid UTF-8")
	}
	for _, r := range v {
		if r == 0 {
			return shoal.Invalid(field, "contains a NUL byte")
		}
		if (r < 0x20 || r == 0x7f) && !(multiline && (r == '\t' || r == '\n' || r == '\r')) {
			return shoal.Invalid(field, "contains the control character %U", r)
		}
	}
	return nil
}

// validBytes reports an encoded size over a limit, naming the field.
func validBytes(field string, m proto.Message, limit int) error {
	if size := proto.Size(m); size > limit {
		return shoal.Invalid(field, "takes %d bytes encoded; at most %d are allowed (each field is within its own limit, but together they are too large)", size, limit)
	}
	return nil
}

func validMeta(field string, m *shoalv1.ObjectMeta) error {
	if m == nil {
		return shoal.Invalid(field, "is required")
	}
	if err := validName(field+".name", m.Name); err != nil {
		return err
	}
	if err := validWorkspace(field+".workspace", m.Workspace); err != nil {
		return err
	}
	if err := validLabels(field+".labels", m.Labels); err != nil {
		return err
	}
	return validAnnotations(field+".annotations", m.Annotations)
}

// reservedEnv says why a variable name may not be given to a container
// (as sandbox env or as a provider's credential), or "". Each of these
// would break every process of the container, or be silently overwritten:
// PATH replaces the image's search path (its commands are no longer
// found), LD_* steer the dynamic loader of every program (LD_PRELOAD,
// LD_LIBRARY_PATH, LD_AUDIT, ...), and SHOAL_SANDBOX and SHOAL_WORKSPACE are
// set by shoal. HOME is allowed: it names a directory and breaks nothing.
func reservedEnv(k string) string {
	switch {
	case k == "PATH":
		return "it would replace the image's PATH, and the container's commands would not be found; set the search path in the image"
	case strings.HasPrefix(k, "LD_"):
		return "LD_* variables steer the dynamic loader of every program in the container (LD_PRELOAD, LD_LIBRARY_PATH, ...); set them in the image or in the command itself"
	case k == "SHOAL_SANDBOX" || k == "SHOAL_WORKSPACE":
		return "shoal sets it to the sandbox's own name or workspace"
	case k == shoal.ExecEnv:
		return "shoal marks the processes of its execs with it"
	}
	return ""
}

func validEnvMap(field string, env map[string]string, max int) error {
	if len(env) > max {
		return shoal.Invalid(field, "%d entries; at most %d are allowed", len(env), max)
	}
	for k, v := range env {
		if !envName.MatchString(k) || len(k) > 256 {
			return shoal.Invalid(field, "%q is not a valid environment variable name (letters, digits and '_', not starting with a digit)", trunc(k))
		}
		if why := reservedEnv(k); why != "" {
			return shoal.Invalid(fmt.Sprintf("%s[%s]", field, k), "%s is reserved: %s", k, why)
		}
		if len(v) > MaxEnvValue {
			return shoal.Invalid(fmt.Sprintf("%s[%s]", field, k), "value is %d bytes; at most %d are allowed", len(v), MaxEnvValue)
		}
		if err := validText(fmt.Sprintf("%s[%s]", field, k), v, true); err != nil {
			return err
		}
	}
	return nil
}

func validProviders(field string, ps []string) error {
	if len(ps) > MaxProviders {
		return shoal.Invalid(field, "%d providers; at most %d are allowed", len(ps), MaxProviders)
	}
	seen := map[string]bool{}
	for i, p := range ps {
		if err := validName(fmt.Sprintf("%s[%d]", field, i), p); err != nil {
			return err
		}
		if seen[p] {
			return shoal.Invalid(fmt.Sprintf("%s[%d]", field, i), "provider %q is listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

func validateSandbox(sb *shoalv1.Sandbox) error {
	if sb == nil {
		return shoal.Invalid("sandbox", "is required")
	}
	if err := validMeta("sandbox.meta", sb.Meta); err != nil {
		return err
	}
	spec := sb.Spec
	if spec == nil {
		return nil
	}
	if err := validImage("sandbox.spec.image", spec.Image); err != nil {
		return err
	}
	if err := validCommand("sandbox.spec.command", spec.Command); err != nil {
		return err
	}
	if err := validEnvMap("sandbox.spec.env", spec.Env, MaxEnv); err != nil {
		return err
	}
	if err := validProviders("sandbox.spec.providers", spec.Providers); err != nil {
		return err
	}
	if spec.Node != "" {
		if err := validName("sandbox.spec.node", spec.Node); err != nil {
			return err
		}
	}
	if err := validLabels("sandbox.spec.node_selector", spec.NodeSelector); err != nil {
		return err
	}
	if r := spec.Resources; r != nil {
		if r.CpuMillis < 0 || (r.CpuMillis > 0 && r.CpuMillis < shoal.MinCPUMillis) || r.CpuMillis > shoal.MaxCPUMillis {
			return shoal.Invalid("sandbox.spec.resources.cpu_millis", "%d is out of range: 0 (no limit) or %d-%d", r.CpuMillis, shoal.MinCPUMillis, shoal.MaxCPUMillis)
		}
		if r.MemoryBytes < 0 || (r.MemoryBytes > 0 && r.MemoryBytes < 6<<20) || r.MemoryBytes > shoal.MaxMemoryBytes {
			return shoal.Invalid("sandbox.spec.resources.memory_bytes", "%d is out of range: 0 (no limit) or 6 MiB to %d bytes", r.MemoryBytes, int64(shoal.MaxMemoryBytes))
		}
	}
	switch spec.RunState {
	case shoalv1.RunState_RUN_STATE_UNSPECIFIED, shoalv1.RunState_RUN_STATE_RUNNING:
	default:
		return shoal.Invalid("sandbox.spec.run_state", "a sandbox is created running (unset or RUN_STATE_RUNNING); stop it afterwards with shoal sandbox stop")
	}
	if spec.RunGeneration != 0 {
		return shoal.Invalid("sandbox.spec.run_generation", "is set by stop and start requests; leave it 0 at create")
	}
	if spec.StopGrace != nil {
		if err := validGrace("sandbox.spec.stop_grace", spec.StopGrace); err != nil {
			return err
		}
	}
	if spec.Egress != nil {
		if _, err := spec.Egress.Policy("sandbox.spec.egress"); err != nil {
			return err
		}
	}
	return validBytes("sandbox.spec", spec, MaxSpecBytes)
}

func validGrace(field string, d *durationpb.Duration) error {
	if err := d.CheckValid(); err != nil {
		return shoal.Invalid(field, "is not a duration: %v", err)
	}
	if g := d.AsDuration(); g < 0 || g > shoal.MaxStopGrace {
		return shoal.Invalid(field, "%s is out of range: 0 (SIGKILL at once) to %s", g, shoal.MaxStopGrace)
	}
	return nil
}

// validImage accepts "" (the node's default) or a Docker image reference
// by the registry's own grammar.
func validImage(field, image string) error {
	if image == "" {
		return nil
	}
	if len(image) > MaxImageLen {
		return shoal.Invalid(field, "is %d characters; at most %d are allowed", len(image), MaxImageLen)
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return shoal.Invalid(field, "%q is not a Docker image reference (like shoal/sandbox:dev): %v", trunc(image), err)
	}
	return nil
}

func validCommand(field string, cmd []string) error {
	if len(cmd) > MaxCommandArgs {
		return shoal.Invalid(field, "%d arguments; at most %d are allowed", len(cmd), MaxCommandArgs)
	}
	for i, a := range cmd {
		f := fmt.Sprintf("%s[%d]", field, i)
		if len(a) > MaxArgLen {
			return shoal.Invalid(f, "is %d bytes; at most %d are allowed", len(a), MaxArgLen)
		}
		if err := validText(f, a, true); err != nil {
			return err
		}
	}
	return nil
}

// validProviderType accepts the named types; UNSPECIFIED only where the
// caller means "leave as is".
func validProviderType(field string, t shoalv1.ProviderType, unspecifiedOK bool) error {
	if t == shoalv1.ProviderType_PROVIDER_TYPE_UNSPECIFIED && unspecifiedOK {
		return nil
	}
	if t == shoalv1.ProviderType_PROVIDER_TYPE_UNSPECIFIED || shoalv1.ProviderType_name[int32(t)] == "" {
		return shoal.Invalid(field, "%d is not a provider type: one of nvidia, openai, anthropic, github, generic", int32(t))
	}
	return nil
}

func validVersion(field string, rv int64) error {
	if rv < 0 {
		return shoal.Invalid(field, "must not be negative (0: no precondition)")
	}
	return nil
}

func validateProvider(p *shoalv1.Provider, create bool) error {
	if p == nil {
		return shoal.Invalid("provider", "is required")
	}
	if err := validMeta("provider.meta", p.Meta); err != nil {
		return err
	}
	if err := validProviderType("provider.type", p.Type, !create); err != nil {
		return err
	}
	// A client's own word for the type (OpenShell's is a free string):
	// kept exactly, so any one-line text, bounded.
	if len(p.TypeName) > MaxNameLen {
		return shoal.Invalid("provider.type_name", "%q is %d bytes; at most %d", trunc(p.TypeName), len(p.TypeName), MaxNameLen)
	}
	if err := validText("provider.type_name", p.TypeName, false); err != nil {
		return err
	}
	if err := validEnvMap("provider.credentials", p.Credentials, MaxCredentials); err != nil {
		return err
	}
	if len(p.Config) > MaxCredentials {
		return shoal.Invalid("provider.config", "%d entries; at most %d are allowed", len(p.Config), MaxCredentials)
	}
	for k, v := range p.Config {
		if k == "" || len(k) > 256 {
			return shoal.Invalid("provider.config", "key %q: keys are 1-256 bytes", trunc(k))
		}
		if err := validText("provider.config", k, false); err != nil {
			return shoal.Invalid("provider.config", "key %q: %v", trunc(k), err.(*shoal.Error).Msg)
		}
		f := fmt.Sprintf("provider.config[%s]", k)
		if len(v) > MaxEnvValue {
			return shoal.Invalid(f, "value is %d bytes; at most %d are allowed", len(v), MaxEnvValue)
		}
		if err := validText(f, v, true); err != nil {
			return err
		}
	}
	return validBytes("provider", &shoalv1.Provider{Credentials: p.Credentials, Config: p.Config}, MaxSpecBytes)
}

func validateRef(ws, name string) error {
	if err := validWorkspace("workspace", ws); err != nil {
		return err
	}
	return validName("name", name)
}

func validPageSize(n int32) error {
	if n < 0 || n > MaxPageSize {
		return shoal.Invalid("page_size", "%d is out of range 0-%d", n, MaxPageSize)
	}
	return nil
}

// validRequestID: a create's idempotency key, a UUID or the like.
func validRequestID(id string) error {
	if id != "" && (len(id) > 64 || validText("request_id", id, false) != nil) {
		return shoal.Invalid("request_id", "must be at most 64 printable characters (a UUID)")
	}
	return nil
}

func validTailLines(n int32) error {
	if n < 0 {
		return shoal.Invalid("tail_lines", "must not be negative")
	}
	return nil
}

// validNewMember checks an AddMember request and returns its peer URLs
// as etcd will store them.
func validNewMember(name string, urls []string) ([]string, error) {
	if err := etcdmember.CheckName(name); err != nil {
		return nil, shoal.Invalid("name", "%v", err)
	}
	if len(urls) == 0 {
		return nil, shoal.Invalid("peer_urls", "give the new member's peer URL (its --etcd-advertise-peer)")
	}
	peers := make([]string, len(urls))
	for i, u := range urls {
		field := fmt.Sprintf("peer_urls[%d]", i)
		if strings.Contains(u, ",") {
			return nil, shoal.Invalid(field, "%q holds a ','; give one URL per entry", trunc(u))
		}
		ic, err := etcdmember.ParseInitialCluster(name + "=" + u)
		if err != nil {
			return nil, shoal.Invalid(field, "%v", err)
		}
		if j := slices.Index(peers[:i], ic[0].URL); j >= 0 {
			return nil, shoal.Invalid(field, "repeats peer_urls[%d]", j)
		}
		peers[i] = ic[0].URL
	}
	return peers, nil
}
