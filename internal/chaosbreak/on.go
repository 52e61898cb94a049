//go:build chaosbreak

package chaosbreak

import (
	"os"
	"strings"
)

// Mode is SHOAL_CHAOS_BREAK, read once at start (doc.go lists the modes).
var Mode = os.Getenv("SHOAL_CHAOS_BREAK")

// Is reports whether mode is one of the modes SHOAL_CHAOS_BREAK names.
func Is(mode string) bool {
	for _, m := range strings.Split(Mode, ",") {
		if strings.TrimSpace(m) == mode {
			return true
		}
	}
	return false
}
