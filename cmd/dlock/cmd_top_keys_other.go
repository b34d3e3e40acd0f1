//go:build !linux

package main

import "os"

// topKeys reads no keys outside Linux: Ctrl-C ends dlock top.
func topKeys(*os.File) (<-chan byte, func()) { return nil, func() {} }
