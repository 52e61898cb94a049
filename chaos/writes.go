package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	shoalv1 "shoal/api/shoal/v1"
)

// Every write the traffic makes to a sandbox is observable: each writer owns
// one key on the record and writes "<writer id>.<sequence>" to it, so a write
// that another writer's stale read-modify-write reverted stays visible (the
// key holds an older value) until its owner writes again, and the next get
// shows it. Label writers (through the API) own the label w<id>; status
// writers (through the store, like the node's own status sync) own the
// status condition of type chaos-s<id>. The model (sandboxModel) tracks all
// of them.

// maxLabelKeys bounds the label keys the writers use: the API allows 64
// labels per object. With more clients than that, clients share keys; the
// writer id in the value keeps their writes apart.
const maxLabelKeys = 48

// statusCondPrefix marks the status conditions that status writers own.
const statusCondPrefix = "chaos-"

func labelKey(writer int) string { return fmt.Sprintf("w%d", writer%maxLabelKeys) }

func statusKey(writer int) string { return fmt.Sprintf("s%d", writer) }

// writeValue is what a writer stores: its id and its own sequence number,
// so that no two writes store the same value.
func writeValue(writer, seq int) string { return fmt.Sprintf("%d.%d", writer, seq) }

// isWriterKey reports whether k is w<n> or s<n>.
func isWriterKey(k string) bool {
	if len(k) < 2 || (k[0] != 'w' && k[0] != 's') {
		return false
	}
	_, err := strconv.ParseUint(k[1:], 10, 32)
	return err == nil
}

// observedWrites is the canonical form of the writers' keys on a record.
func observedWrites(sb *shoalv1.Sandbox) string {
	kv := map[string]string{}
	for k, v := range sb.GetMeta().GetLabels() {
		if isWriterKey(k) && k[0] == 'w' {
			kv[k] = v
		}
	}
	for _, c := range sb.GetStatus().GetConditions() {
		if k, ok := strings.CutPrefix(c.GetType(), statusCondPrefix); ok && isWriterKey(k) && k[0] == 's' {
			kv[k] = c.GetMessage()
		}
	}
	return encodeWrites(kv)
}

// encodeWrites is "k=v,k=v" sorted by key: porcupine states must be
// comparable, and two equal maps must give the same state.
func encodeWrites(kv map[string]string) string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(kv[k])
	}
	return b.String()
}

// setWrite returns enc with key k set to v ("k=v" is a write's Arg).
func setWrite(enc, arg string) string {
	k, _, _ := strings.Cut(arg, "=")
	pairs := []string{}
	if enc != "" {
		pairs = strings.Split(enc, ",")
	}
	i, found := slices.BinarySearchFunc(pairs, k, func(p, k string) int {
		pk, _, _ := strings.Cut(p, "=")
		return strings.Compare(pk, k)
	})
	if found {
		pairs[i] = arg
	} else {
		pairs = slices.Insert(pairs, i, arg)
	}
	return strings.Join(pairs, ",")
}

// setStatusWrite sets the status condition that status writer key k owns.
func setStatusWrite(sb *shoalv1.Sandbox, k, v string) {
	if sb.Status == nil {
		sb.Status = &shoalv1.SandboxStatus{}
	}
	typ := statusCondPrefix + k
	for _, c := range sb.Status.Conditions {
		if c.Type == typ {
			c.Message = v
			return
		}
	}
	sb.Status.Conditions = append(sb.Status.Conditions, &shoalv1.Condition{Type: typ, Status: "True", Reason: "ChaosWrite", Message: v})
}
