//go:build !unix

package tarcopy

import (
	"errors"
	"io/fs"
	"os"
	"time"
)

type fileID struct{}

func linkID(fs.FileInfo) (fileID, bool) { return fileID{}, false }

func lchtimes(*os.Root, string, time.Time) error { return nil }

func mkfifo(*os.Root, string, uint32) error {
	return errors.New("named pipes are not supported here")
}
