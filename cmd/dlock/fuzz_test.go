package main

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseArgs feeds arbitrary command lines (arguments separated by
// NUL) to every command's parser. Parsing never acts, so it is safe to
// fuzz: it must not panic, must fail only with a usage error (exit 2) or
// succeed, and must never echo a password given in a URL.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		"x\x00--\x00true",
		"x\x00true",
		"-n\x00-E\x0075\x00x\x00-c\x00exit 3",
		"-w\x001s\x00--redis\x00redis://h:notaport\x00x",
		"--wait\x005s\x00--lease\x001m\x00--kind\x00mutex\x00--fencing\x00x\x00--\x00sh\x00-c\x00exit 3",
		"--redis\x00redis://u:secret@h:1/2?dial_timeout=3\x00x\x00--\x00true",
		"--redis\x00redis://h:1?addr=h:2&addr=h:3\x00x\x00--json",
		"--redis\x00redis://u:secret@h:1?master_name=m&password=secret\x00x",
		"--redis\x00redis://u:secret@h:1?cluster=true\x00x",
		"--redis\x00h:1\x00--redis\x00h:2\x00x\x00--\x00true",
		"-redis\x00//0:secret@",
		"x\x00--json\x00--\x00-y",
		"--force\x00--yes\x00x",
		"--wait\x00-1s\x00x\x00--\x00true",
		"-h",
		"--nope",
		"--grace\x00\x00x",
		"x\x00--\x00",
		"",
	} {
		f.Add(seed)
	}
	c := &cli{stdout: new(syncBuffer), stderr: new(syncBuffer), getenv: func(string) string { return "" }}
	parsers := map[string]func([]string) error{
		"run":     func(a []string) error { _, err := c.parseRun(a); return err },
		"hold":    func(a []string) error { _, err := c.parseHold(a); return err },
		"status":  func(a []string) error { _, err := c.parseStatus(a); return err },
		"list":    func(a []string) error { _, err := c.parseList(a); return err },
		"unlock":  func(a []string) error { _, err := c.parseUnlock(a); return err },
		"demo":    func(a []string) error { _, err := c.parseDemo(a); return err },
		"version": func(a []string) error { _, err := c.parseVersion(a); return err },
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		for cmd, parse := range parsers {
			err := parse(args)
			if err == nil {
				continue
			}
			var e *exitError
			if !errors.As(err, &e) || (e.code != exitUsage && e != errHelp) {
				t.Fatalf("%s %q: %v, want a usage error", cmd, args, err)
			}
			if p := leakedPassword(args, e.msg); p != "" {
				t.Fatalf("%s %q: the password %q is in the message %q", cmd, args, p, e.msg)
			}
		}
	})
}

// leakedPassword returns a password given in a --redis URL of args that
// msg shows, unless it also appears in args outside that URL (then the
// message may be quoting something else).
func leakedPassword(args []string, msg string) string {
	for i, a := range args {
		if i == 0 || (args[i-1] != "--redis" && args[i-1] != "-redis") {
			continue
		}
		u, err := url.Parse(a)
		if err != nil {
			continue
		}
		p, ok := u.User.Password()
		if !ok || len(p) < 4 || !strings.Contains(msg, p) {
			continue
		}
		elsewhere := false
		for j, b := range args {
			elsewhere = elsewhere || (j != i && strings.Contains(b, p))
		}
		if !elsewhere && !strings.Contains(strings.Replace(a, p, "", 1), p) {
			return p
		}
	}
	return ""
}
