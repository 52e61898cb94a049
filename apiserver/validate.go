package apiserver

import (
	"fmt"
	"regexp"
	"strings"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// Limits on requests.
const (
	MaxNameLen        = 63
	MaxProviders      = store.MaxProvidersPerSandbox
	MaxEnv            = 128
	MaxEnvValue       = 8 << 10
	MaxLabels         = 64
	MaxLabelValue     = 63
	MaxAnnotationSize = 64 << 10
	MaxCredentials    = 64
	MaxCommandArgs    = 256
	MaxArgLen         = 8 << 10
	MaxImageLen       = 255
	MaxPageSize       = 1000
	// MaxRequestBytes bounds any single request message.
	MaxRequestBytes = 4 << 20
	// MaxResponseBytes bounds any single response or stream message the
	// server sends; clients set their receive limit to it. List pages and
	// output chunks are cut well below it.
	MaxResponseBytes = 8 << 20
)

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
	size := 0
	for k, v := range ann {
		if err := validLabelKey(field, k); err != nil {
			return err
		}
		size += len(k) + len(v)
	}
	if size > MaxAnnotationSize {
		return shoal.Invalid(field, "annotations total %d bytes; at most %d are allowed", size, MaxAnnotationSize)
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

func validEnvMap(field string, env map[string]string, max int) error {
	if len(env) > max {
		return shoal.Invalid(field, "%d entries; at most %d are allowed", len(env), max)
	}
	for k, v := range env {
		if !envName.MatchString(k) || len(k) > 256 {
			return shoal.Invalid(field, "%q is not a valid environment variable name (letters, digits and '_', not starting with a digit)", trunc(k))
		}
		if len(v) > MaxEnvValue {
			return shoal.Invalid(fmt.Sprintf("%s[%s]", field, k), "value is %d bytes; at most %d are allowed", len(v), MaxEnvValue)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return shoal.Invalid(fmt.Sprintf("%s[%s]", field, k), "value contains a NUL byte")
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
	if len(spec.Image) > MaxImageLen || strings.ContainsAny(spec.Image, " \t\n\x00") {
		return shoal.Invalid("sandbox.spec.image", "%q is not an image reference", trunc(spec.Image))
	}
	if len(spec.Command) > MaxCommandArgs {
		return shoal.Invalid("sandbox.spec.command", "%d arguments; at most %d are allowed", len(spec.Command), MaxCommandArgs)
	}
	for i, a := range spec.Command {
		if len(a) > MaxArgLen || strings.IndexByte(a, 0) >= 0 {
			return shoal.Invalid(fmt.Sprintf("sandbox.spec.command[%d]", i), "arguments are at most %d bytes with no NUL", MaxArgLen)
		}
	}
	if err := validEnvMap("sandbox.spec.env", spec.Env, MaxEnv); err != nil {
		return err
	}
	if err := validProviders("sandbox.spec.providers", spec.Providers); err != nil {
		return err
	}
	if r := spec.Resources; r != nil {
		if r.CpuMillis < 0 {
			return shoal.Invalid("sandbox.spec.resources.cpu_millis", "must not be negative")
		}
		if r.MemoryBytes < 0 || (r.MemoryBytes > 0 && r.MemoryBytes < 6<<20) {
			return shoal.Invalid("sandbox.spec.resources.memory_bytes", "must be 0 (no limit) or at least 6 MiB")
		}
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
	if create && (p.Type == shoalv1.ProviderType_PROVIDER_TYPE_UNSPECIFIED || shoalv1.ProviderType_name[int32(p.Type)] == "") {
		return shoal.Invalid("provider.type", "must be one of nvidia, openai, anthropic, github, generic")
	}
	if err := validEnvMap("provider.credentials", p.Credentials, MaxCredentials); err != nil {
		return err
	}
	if len(p.Config) > MaxCredentials {
		return shoal.Invalid("provider.config", "%d entries; at most %d are allowed", len(p.Config), MaxCredentials)
	}
	for k, v := range p.Config {
		if k == "" || len(k) > 256 || len(v) > MaxEnvValue {
			return shoal.Invalid("provider.config", "keys must be 1-256 bytes and values at most %d bytes", MaxEnvValue)
		}
	}
	return nil
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
