// Package tarcopy is the tar side of `shoal sandbox cp`: docker cp's rules
// for where a copy lands, written once and used at both ends.
//
// A copy is a tar stream whose entries lie under one top-level entry, the
// source: a file, a symbolic link (copied as a link) or a directory with
// everything under it, named by its base name, or "." for a directory's
// contents (SRC/.). A tar stream given as `-` has no such entry: it is
// extracted as it is, into a directory. Place decides, from the source and
// what the destination is, which directory the stream is extracted into and
// what the source's top-level entry is renamed to there (docker cp's
// table: a missing destination takes the source's place under its own
// name; an existing directory receives the source, or with SRC/. its
// contents).
//
// Write makes the stream of a local source (symbolic links are not
// followed, modes and mtimes to the second are kept, owners are root's,
// hard links stay links). Rebase is the owner node's filter on the way into
// a sandbox: it renames the top-level entry and refuses anything outside
// it. Extract writes a sandbox's stream under a local directory through an
// os.Root, and never follows a symbolic link while it writes: an entry that
// would land outside the destination (an absolute name, a name climbing
// out with .., a path through a symbolic link, a hard link to outside) is
// skipped and reported, as are device files; setuid and setgid bits are
// dropped. What a sandbox sends is untrusted.
package tarcopy
