package apiserver

import (
	"strings"

	"shoal"
)

// selector is a parsed label selector: comma-separated terms that must all
// hold. Terms: k=v, k==v, k!=v, k (exists), !k (does not exist).
type selector []term

type term struct {
	key, value string
	op         string // "=", "!=", "exists", "!exists"
}

func parseSelector(s string) (selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var sel selector
	for _, raw := range strings.Split(s, ",") {
		t := strings.TrimSpace(raw)
		var tm term
		switch {
		case t == "":
			return nil, shoal.Invalid("label_selector", "empty term in %q", trunc(s))
		case strings.Contains(t, "!="):
			k, v, _ := strings.Cut(t, "!=")
			tm = term{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "!="}
		case strings.Contains(t, "=="):
			k, v, _ := strings.Cut(t, "==")
			tm = term{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "="}
		case strings.Contains(t, "="):
			k, v, _ := strings.Cut(t, "=")
			tm = term{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "="}
		case strings.HasPrefix(t, "!"):
			tm = term{key: strings.TrimSpace(t[1:]), op: "!exists"}
		default:
			tm = term{key: t, op: "exists"}
		}
		if err := validLabelKey("label_selector", tm.key); err != nil {
			return nil, err
		}
		if (tm.op == "=" || tm.op == "!=") && (len(tm.value) > MaxLabelValue || !labelValue.MatchString(tm.value)) {
			return nil, shoal.Invalid("label_selector", "value %q of %q is not a valid label value", trunc(tm.value), tm.key)
		}
		sel = append(sel, tm)
	}
	return sel, nil
}

func (s selector) matches(labels map[string]string) bool {
	for _, t := range s {
		v, ok := labels[t.key]
		switch t.op {
		case "=":
			if !ok || v != t.value {
				return false
			}
		case "!=":
			if ok && v == t.value {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		}
	}
	return true
}
