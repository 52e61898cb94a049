package shoalv1

import "strings"

// EffectiveTypeName is the provider's type as clients see it named: the
// name it was created with (type_name), or else the lower-case name of its
// type ("nvidia", "generic").
func (x *Provider) EffectiveTypeName() string {
	if n := x.GetTypeName(); n != "" {
		return n
	}
	if x.GetType() == ProviderType_PROVIDER_TYPE_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(x.GetType().String())
}
