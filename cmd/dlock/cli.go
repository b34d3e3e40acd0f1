package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
)

// usage is the text of "dlock help".
const usage = `dlock: distributed locks on Redis, Redisson-compatible, from the command line.

Usage:
  dlock run [flags] NAME COMMAND [ARGS...]   run COMMAND while holding lock NAME
  dlock run [flags] NAME -c 'SHELL COMMAND'  the same, through sh -c
  dlock run --permits N NAME COMMAND [ARGS]  run COMMAND under one of N permits of NAME
  dlock hold [flags] NAME                    hold lock NAME until interrupted; print its env
  dlock status [flags] NAME                  show who holds NAME: kind, holders, TTL, queue, token;
                                             a semaphore's permits
  dlock list [flags] [PATTERN]               list the locks whose name matches PATTERN (default *)
  dlock top [flags] [PATTERN]                a live view of those locks, most waited-for first
  dlock unlock --force [--yes] [flags] NAME  delete lock NAME whoever holds it
  dlock clear-queue [--yes] [flags] NAME     delete fair lock NAME's waiting queue
  dlock elect [flags] NAME [--] COMMAND      run COMMAND while elected leader of NAME
  dlock leader [--watch] [flags] NAME        show the leader of NAME (and each change)
  dlock deadlocks [flags]                    find wait-for cycles among owners across processes
  dlock ui [--listen ADDR] [--allow-writes]  an operator's web console: live locks, charts
  dlock demo [flags]                         a live demo on a throwaway Redis server
  dlock version [--json]                     print version information (also --version, -V)
  dlock help [COMMAND | TOPIC]               show the help of COMMAND, or of TOPIC:
    connection   --redis URL forms, $DLOCK_REDIS_URL and $REDIS_URL, Cluster,
                 Sentinel, RedLock over several servers
    exit-codes   what dlock's exit status means

Connection: --redis URL, else $DLOCK_REDIS_URL, else $REDIS_URL, else
redis://127.0.0.1:6379; see "dlock help connection".
`

// connectionHelp is "dlock help connection": how every command that talks
// to Redis finds it.
const connectionHelp = `Connection:
  --redis URL     the Redis deployment; default $DLOCK_REDIS_URL, else $REDIS_URL,
                  else redis://127.0.0.1:6379
    redis://[user:password@]host:port[/db]     one server; rediss:// for TLS, unix:///path.sock
    host:port                                  short for redis://host:port
    redis://host:port?addr=host2:port2&...     Redis Cluster: seed addresses (go-redis
                                               ParseClusterURL); ?cluster=true with one seed
    redis://[user:password@]host:port?master_name=NAME[&addr=host2:port2][&password=P]
                                               Sentinel (go-redis ParseFailoverURL): the host
                                               and addr= are sentinels, user:password@ logs in
                                               to them, password= to the master
    Other query parameters set go-redis options (dial_timeout=3s, ...). A password never
    appears in dlock's output: URLs are printed with it masked. Percent-encode reserved
    characters (/ # ? @ %) in a user name or password.
  --redis given 3, 5, ... times (or as many URLs in DLOCK_REDIS_URL, separated by
    spaces) names independent servers: dlock run and hold take a RedLock over them (a
    mutex held while a majority hold it); status and list show each server.
`

// exitHelp is "dlock help exit-codes"; codes.go defines the codes.
const exitHelp = `Exit status:
  0      success
  1      error: a Redis command failed, or the user declined a prompt
  2      usage: unknown command or flag, bad argument, bad URL (or a database the
         server does not have)
  3      the lock (or --permits permit) was not obtained: held by another owner
         (no permit free) with -n, or not within --wait; run and hold take
         another status with -E N (--conflict-exit-code)
  4      Redis unreachable: connection refused, timeout, DNS, TLS
  5      Redis refused the credentials (wrong user or password, missing ACL permission)
  6      run, hold: the lock (or permit) was lost (run stopped COMMAND); elect: the
         leadership was lost (COMMAND was stopped; --on-loss exit)
  7      deadlocks: a wait-for cycle was found (printed on stdout)
  126    run: COMMAND could not be executed
  127    run: COMMAND was not found
  128+N  run: COMMAND was killed by signal N, or dlock by signal N while waiting
  other  run: COMMAND's own exit status

dlock run exits with COMMAND's status, so a COMMAND that can itself exit 1 to 6
is ambiguous: give -E a status COMMAND never uses to tell "lock not obtained"
apart (as with flock -E), and read dlock's own messages on stderr, which start
with "dlock:".
`

// seeHelp ends the usage text of every command that talks to Redis, in
// place of the connection and exit status help.
const seeHelp = `More: "dlock help connection" (--redis URL forms, $DLOCK_REDIS_URL, $REDIS_URL),
"dlock help exit-codes" (what each exit status means).
`

// topics are the help pages that are not commands.
var topics = map[string]string{
	"connection": connectionHelp,
	"exit-codes": exitHelp,
}

// cli is one invocation of dlock: its standard streams and environment.
// Tests build one to feed stdin or an environment.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	logOnce sync.Once
	logs    *cliLog // the library's and go-redis's log lines; see log()
}

// command is a dlock subcommand.
type command struct {
	name  string
	usage string // the help text of the command
	run   func(c *cli, ctx context.Context, args []string) error
}

// commands lists the subcommands; each lives in its cmd_<name>.go file.
func commands() []command {
	return []command{
		{"run", runUsage, (*cli).runCmd},
		{"hold", holdUsage, (*cli).holdCmd},
		{"status", statusUsage, (*cli).statusCmd},
		{"list", listUsage, (*cli).listCmd},
		{"top", topUsage, (*cli).topCmd},
		{"unlock", unlockUsage, (*cli).unlockCmd},
		{"clear-queue", clearQueueUsage, (*cli).clearQueueCmd},
		{"elect", electUsage, (*cli).electCmd},
		{"leader", leaderUsage, (*cli).leaderCmd},
		{"deadlocks", deadlocksUsage, (*cli).deadlocksCmd},
		{"ui", uiUsage, (*cli).uiCmd},
		{"demo", demoUsage, (*cli).demoCmd},
		{"version", versionUsage, (*cli).versionCmd},
	}
}

// run is the whole program: it runs the command in args (without the
// program name) and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return c.main(ctx, args)
}

func (c *cli) main(ctx context.Context, args []string) int {
	// go-redis logs dial and pool errors on its own; dlock reports
	// failures itself, in one line, with passwords masked, and shows
	// go-redis's lines only with -v, in its own format.
	routeRedisLog(c.log())
	return c.report(c.dispatch(ctx, args))
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage)
		return usageError("no command given")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return c.help(rest)
	case "--version", "-version", "-V":
		return c.versionCmd(ctx, rest)
	}
	for _, cmd := range commands() {
		if cmd.name == name {
			return cmd.run(c, ctx, rest)
		}
	}
	return usageError("unknown command %q; run \"dlock help\"", name)
}

// help prints the usage of one command, or of dlock.
func (c *cli) help(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, usage)
		return nil
	}
	if text, ok := topics[args[0]]; ok {
		fmt.Fprint(c.stdout, text)
		return nil
	}
	for _, cmd := range commands() {
		if cmd.name == args[0] {
			fmt.Fprint(c.stdout, cmd.usage)
			return nil
		}
	}
	return usageError("unknown command or help topic %q; run \"dlock help\"", args[0])
}

// report prints err, if any, as one line on stderr and returns the exit
// code it carries.
func (c *cli) report(err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitError
	if !errors.As(err, &e) {
		e = &exitError{code: exitFailure, msg: err.Error()}
	}
	if e.msg != "" {
		msg := strings.TrimPrefix(e.msg, "dlock: ")
		fmt.Fprintf(c.stderr, "dlock: %s\n", strings.ReplaceAll(msg, "\n", " "))
	}
	return e.code
}

// newFlagSet returns a flag set for a subcommand that returns errors
// rather than printing them and exiting.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("dlock "+name, flag.ContinueOnError)
	// Errors come back from Parse and are reported once, by report.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// defineHook, when set (by a test), sees each command's flag set before it
// parses, with every flag defined.
var defineHook func(*flag.FlagSet)

// parse parses args with fs, allowing flags after positional arguments
// ("dlock status NAME --json"), and returns the positional arguments. A
// "--" ends the flags: everything after it is positional. -h prints help
// and returns errHelp.
func (c *cli) parse(fs *flag.FlagSet, help string, args []string) ([]string, error) {
	if defineHook != nil {
		defineHook(fs)
	}
	var pos []string
	for {
		if err := c.parseFlags(fs, help, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseFlags parses the flags at the start of args with fs; fs.Args()
// then holds the rest, after a "--" that ended the flags. -h prints help
// and returns errHelp.
func (c *cli) parseFlags(fs *flag.FlagSet, help string, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.stdout, help)
		return errHelp
	}
	if err != nil {
		cmd := strings.TrimPrefix(fs.Name(), "dlock ")
		return usageError("%s: %s; run \"dlock help %s\"", cmd, helpSpelling(err.Error()), cmd)
	}
	return nil
}

// flagInError is a flag name in an error of package flag, which writes
// every flag with one dash: "invalid value ... for flag -lease",
// "invalid boolean value ... for -json", "flag needs an argument:
// -lease", "flag provided but not defined: -leese".
var flagInError = regexp.MustCompile(`(for flag |for |needs an argument: |not defined: )-([A-Za-z0-9][A-Za-z0-9-]+)`)

// helpSpelling rewrites the flag names in an error of package flag as
// the help texts spell them: --lease for a long name, -w for a letter
// (which package flag already writes so).
func helpSpelling(msg string) string {
	return flagInError.ReplaceAllString(msg, "${1}--${2}")
}
