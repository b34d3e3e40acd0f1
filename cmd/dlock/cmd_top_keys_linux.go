package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// topKeys puts the terminal f in cbreak mode, so that keys arrive one by
// one without echo (Ctrl-C still interrupts), and sends each key read on
// the returned channel. restore gives the terminal its mode back. When f
// is not a terminal the channel is nil: only signals end dlock top.
func topKeys(f *os.File) (keys <-chan byte, restore func()) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, func() {}
	}
	cbreak := *old
	cbreak.Lflag &^= unix.ICANON | unix.ECHO
	cbreak.Cc[unix.VMIN], cbreak.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &cbreak); err != nil {
		return nil, func() {}
	}
	ch := make(chan byte, 16)
	go func() {
		// Blocks in Read until a key or the process's end: dlock exits
		// right after top ends.
		var b [1]byte
		for {
			n, err := f.Read(b[:])
			if err != nil {
				return
			}
			if n == 1 {
				select {
				case ch <- b[0]:
				default:
				}
			}
		}
	}()
	return ch, func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }
}
