//go:build chaosbreak

package store

import "os"

// brokenMode breaks one guarantee on purpose, so the chaos suite can show
// that it catches it. Test builds only (go build -tags chaosbreak):
//
//	SHOAL_CHAOS_BREAK=skip-compare    the update loop drops its ModRevision compare
//	SHOAL_CHAOS_BREAK=check-then-act  provider delete checks for attachments, then
//	                                  deletes without comparing them in the Txn
var brokenMode = os.Getenv("SHOAL_CHAOS_BREAK")
