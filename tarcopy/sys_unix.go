//go:build unix

package tarcopy

import (
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileID is a file's identity on its host: its device and inode.
type fileID struct{ dev, ino uint64 }

// linkID is fi's identity when it has more than one link.
func linkID(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink < 2 {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true
}

// inDir runs f on the file descriptor of name's directory (opened through
// root, so never outside it) and name's last element.
func inDir(root *os.Root, name string, f func(dirfd int, base string) error) error {
	d, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	return f(int(d.Fd()), path.Base(name))
}

// lchtimes sets the mtime of the symbolic link name itself.
func lchtimes(root *os.Root, name string, mtime time.Time) error {
	return inDir(root, name, func(fd int, base string) error {
		ts := unix.NsecToTimespec(mtime.UnixNano())
		return unix.UtimesNanoAt(fd, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// mkfifo makes the named pipe name.
func mkfifo(root *os.Root, name string, mode uint32) error {
	return inDir(root, name, func(fd int, base string) error { return unix.Mkfifoat(fd, base, mode) })
}
