package main

import (
	"fmt"
	"math"
	"strconv"
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
	d, err := parseDuration(v)
	if err != nil {
		return err
	}
	f.d, f.set = d, true
	return nil
}

// durationFlag is a time.Duration flag that takes what parseDuration
// does.
type durationFlag struct{ d *time.Duration }

// newDurationFlag returns a durationFlag setting *p, which holds the
// default.
func newDurationFlag(p *time.Duration, def time.Duration) durationFlag {
	*p = def
	return durationFlag{p}
}

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := parseDuration(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// maxSeconds bounds a bare number of seconds, so that it fits a
// time.Duration (about 292 years).
const maxSeconds = 1e9

// parseDuration reads a duration flag: a Go duration ("500ms", "10s",
// "2m") or, as flock(1) takes its -w, a bare number of seconds ("5",
// "0.5"). It must not be negative.
func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || strings.ContainsAny(v, "xXpP_") {
			return 0, fmt.Errorf("not a duration (seconds like 5 or 0.5, or 500ms, 10s, 2m): %q", v)
		}
		if secs > maxSeconds {
			return 0, fmt.Errorf("duration %q is too long", v)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %v", d)
	}
	return d, nil
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
