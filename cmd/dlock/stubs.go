package main

import "context"

var demoUsage = `Usage: dlock demo [--redis URL]

A live demo of what dlock does.

Flags:
  --redis URL   use this Redis instead of a throwaway redis-server
`

// parseDemo reads the command line of dlock demo without acting on it.
func (c *cli) parseDemo(args []string) ([]endpoint, error) {
	fs := newFlagSet("demo")
	conn := addConnFlags(fs)
	pos, err := c.parse(fs, demoUsage, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageError("demo: unexpected argument %q", pos[0])
	}
	if len(conn.urls) == 0 {
		return nil, nil
	}
	return c.endpoints(conn)
}

func (c *cli) demoCmd(_ context.Context, args []string) error {
	if _, err := c.parseDemo(args); err != nil {
		return err
	}
	return exitf(exitFailure, "demo: not written yet")
}
