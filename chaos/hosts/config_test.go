package hosts

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // in the error; "" for none
	}{
		{"defaults", func(*Config) {}, ""},
		{"no voter", func(c *Config) { c.Voters = -1 }, "Voters=-1"},
		{"negative workers", func(c *Config) { c.Workers = -1 }, "Workers=-1"},
		{"too many", func(c *Config) { c.Workers = maxNodes }, "at most"},
		{"relative binary", func(c *Config) { c.Binary = "bin/shoal" }, "absolute"},
		{"short node TTL", func(c *Config) { c.NodeTTL = 500 * time.Millisecond }, "NodeTTL=500ms"},
		{"bad env", func(c *Config) { c.Env = []string{"NOVALUE"} }, `Env "NOVALUE"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig("/usr/bin/shoal")
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A dynamically linked binary cannot run FROM scratch, and says how to
// build one that can.
func TestCheckStatic(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to check")
	}
	err = checkStatic(sh)
	if err == nil {
		t.Skipf("%s is static here: nothing dynamic to check against", sh)
	}
	if !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("checkStatic(%s): %v, want the advice to build with CGO_ENABLED=0", sh, err)
	}
	if err := checkStatic("/nonexistent"); err == nil {
		t.Fatal("checkStatic of a missing file: no error")
	}
}
