//go:build !chaosbreak

package store

// brokenMode is the deliberately broken guarantee, for proving that the
// chaos suite's checkers can fail. Only binaries built with the chaosbreak
// tag can set it (break_on.go); in every other build it is empty and the
// checks below compile away.
const brokenMode = ""
