package main

import (
	"fmt"
	"strings"
	"time"
)

// stringsFlag is a flag that may be given several times.
type stringsFlag []string

func (f *stringsFlag) String() string { return strings.Join(*f, " ") }

func (f *stringsFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// optDuration is a duration flag that knows whether it was given, so that
// 0 can mean something ("try once") other than "not given".
type optDuration struct {
	d   time.Duration
	set bool
}

func (f *optDuration) String() string {
	if !f.set {
		return ""
	}
	return f.d.String()
}

func (f *optDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("not a duration (like 500ms, 10s, 2m): %q", v)
	}
	if d < 0 {
		return fmt.Errorf("negative duration %v", d)
	}
	f.d, f.set = d, true
	return nil
}

// optString is a string flag that knows whether it was given.
type optString struct {
	s   string
	set bool
}

func (f *optString) String() string { return f.s }

func (f *optString) Set(v string) error {
	f.s, f.set = v, true
	return nil
}
