package audit_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"shoal/audit"
)

// Concurrent writers: every record is one whole JSON line; past MaxBytes
// the file rotates to FILE.1, FILE.2, and no more than Backups are kept;
// nothing is lost from the files that are kept.
func TestLogRotatesBySize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.log")
	l, err := audit.Open(path, audit.Options{MaxBytes: 4096, Backups: 2})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if err := l.Write(audit.Record{Method: "/shoal.v1.Shoal/CreateSandbox", Object: "default/x", Code: "OK", RequestID: strings.Repeat("r", w+i)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range []string{path, path + ".1", path + ".2"} {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		st, _ := fh.Stat()
		if st.Size() > 4096 || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v", f, st.Size(), st.Mode().Perm())
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r audit.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Code != "OK" {
				t.Fatalf("%s: line %q: %v", f, sc.Text(), err)
			}
			total++
		}
		fh.Close()
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("a third backup was kept")
	}
	if total == 0 || total >= 200 {
		t.Errorf("%d records in the kept files (200 written, the oldest rotated away)", total)
	}
}
