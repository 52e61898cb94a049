//go:build !chaosbreak

package chaosbreak

// Mode is empty in every build without the chaosbreak tag: nothing can be
// broken.
const Mode = ""

// Is is false in every build without the chaosbreak tag; it inlines to a
// constant, so every `if chaosbreak.Is(...)` compiles away.
func Is(string) bool { return false }
