package main

import "context"

var listUsage = "Usage: dlock list [flags] [PATTERN]\n"
var demoUsage = "Usage: dlock demo\n"

func (c *cli) listCmd(context.Context, []string) error { return exitf(exitFailure, "list: not written yet") }
func (c *cli) demoCmd(context.Context, []string) error { return exitf(exitFailure, "demo: not written yet") }
