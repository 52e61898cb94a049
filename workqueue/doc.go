// Package workqueue is a small deduplicating work queue for reconcile
// loops: an item added while queued is queued once; an item added while in
// flight runs once more after the current run, never twice at once.
package workqueue
