// Package audit writes a node's audit log: one JSON line per mutating call
// and per exec (or log read) it serves, with who made it, what it touched
// and how it ended, to a file rotated by size (--audit-log FILE,
// --audit-log-max-mib, --audit-log-backups). A record never holds a request
// body, so never a credential value. docs/security.md describes the fields.
package audit
