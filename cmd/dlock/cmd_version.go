package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
)

const versionUsage = `Usage: dlock version [--json]

Prints dlock's version (the module version it was built from, "(devel)"
for a build from a working tree), its VCS revision when known, and the Go
and go-redis versions.

Flags:
  --json   print JSON
`

// versionInfo is what dlock version prints.
type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	GoRedis  string `json:"go_redis,omitempty"`
	Platform string `json:"platform"`
}

// parseVersion reads the command line of dlock version: whether --json
// was given.
func (c *cli) parseVersion(args []string) (asJSON bool, err error) {
	fs := newFlagSet("version")
	fs.BoolVar(&asJSON, "json", false, "")
	pos, err := c.parse(fs, versionUsage, args)
	if err != nil {
		return false, err
	}
	if len(pos) > 0 {
		return false, usageError("version: unexpected argument %q", pos[0])
	}
	return asJSON, nil
}

func (c *cli) versionCmd(_ context.Context, args []string) error {
	asJSON, err := c.parseVersion(args)
	if err != nil {
		return err
	}
	v := buildVersion()
	if asJSON {
		return writeJSON(c.stdout, v)
	}
	fmt.Fprintf(c.stdout, "dlock %s\n", v.Version)
	if v.Revision != "" {
		mod := ""
		if v.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(c.stdout, "revision  %s%s\n", v.Revision, mod)
	}
	fmt.Fprintf(c.stdout, "go        %s %s\n", v.Go, v.Platform)
	if v.GoRedis != "" {
		fmt.Fprintf(c.stdout, "go-redis  %s\n", v.GoRedis)
	}
	return nil
}

// buildVersion reads the version from the build information the Go tool
// embeds in every binary.
func buildVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/redis/go-redis/v9" {
			v.GoRedis = d.Version
		}
	}
	return v
}

// writeJSON prints v as indented JSON.
func writeJSON(w interface{ Write([]byte) (int, error) }, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
