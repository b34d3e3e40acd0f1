package main

// dlock elect and dlock leader: the library's leader election
// (dlock.Election) from the shell. elect runs a command while its process
// is the leader, as run does while it holds a lock; leader prints who
// leads, and with --watch every change, pushed to it by Redis.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

var electUsage = `Usage: dlock elect [flags] NAME [flags] [--] COMMAND [ARGS...]

Campaigns in the leader election NAME and runs COMMAND while elected: at
most one dlock elect (or program using dlock's Election on NAME) leads at
a time. When COMMAND exits, dlock resigns (the next candidate is elected
at once) and exits with COMMAND's status. Followers and tools see the
leader with "dlock leader NAME".

The leadership is a lock on NAME renewed every third of --watchdog, so a
leader killed with SIGKILL is replaced within --watchdog (10s by default).
If the leadership is lost while COMMAND runs (not renewed in time, the
lock deleted), dlock sends SIGTERM to COMMAND's process group, SIGKILL
after --grace, and then, with --on-loss exit (the default), exits with
status 6; with --on-loss recampaign it campaigns again and runs COMMAND
anew when elected again.

COMMAND gets dlock's environment plus:
  DLOCK_NAME          the election's name
  DLOCK_OWNER         the leadership's owner, "<clientUUID>:<n>"
  DLOCK_TOKEN         the leadership's fencing token: larger for every new leader
  DLOCK_LEADER_VALUE  the value this leader announced (--value)

Flags:
  --value TEXT            the value announced while leading, which "dlock leader"
                          shows (default: HOST:PID)
  --on-loss exit|recampaign
                          what to do when the leadership is lost (default exit)
  -w, --wait DURATION     give up when not elected within DURATION (exit 3); a bare
                          number is seconds. Default: wait as long as it takes
  --watchdog DURATION     lease of the leadership, renewed every third of it
                          (default 10s)
  --grace DURATION        time COMMAND has between SIGTERM and SIGKILL when the
                          leadership is lost (default 5s)
  --label TEXT            the holder's label (default: COMMAND)
  -v                      say on stderr when elected and when resigning
  --redis URL             the Redis deployment (one; no RedLock)

dlock elect exits with COMMAND's status, 3 when not elected within --wait,
6 when the leadership was lost (--on-loss exit), 128+N when signal N
interrupted the campaign, and 1, 2, 4, 5 as every command does.

` + seeHelp

var leaderUsage = `Usage: dlock leader [flags] NAME

Prints the leader of the election NAME: its value, owner, host and pid,
since when it leads, and its fencing token; "no leader" when nobody leads.
With --watch it prints the leader and then every change (a new leader, a
new value, the end of a leadership) as it happens, pushed by Redis, until
interrupted.

Flags:
  --watch       print every change until interrupted
  --json        one JSON object per line: {"name", "leader": false} when
                nobody leads, else {"name", "leader": true, "value", "owner",
                "host", "pid", "program", "label", "since", "token", "seq"}
  --redis URL   the Redis deployment

dlock leader exits 0 also when nobody leads.

` + seeHelp

// electArgs is a parsed dlock elect command line.
type electArgs struct {
	eps      []endpoint
	name     string
	argv     []string
	value    optString
	onLoss   string
	wait     optDuration
	watchdog time.Duration
	grace    time.Duration
	label    optString
	verbose  bool
}

// electSynopsis ends elect's usage errors.
const electSynopsis = "usage: dlock elect [flags] NAME [--] COMMAND [ARGS...]"

// parseElect reads the command line of dlock elect: flags before and
// after NAME, then COMMAND, which starts at the first word that is not a
// flag (or after "--").
func (c *cli) parseElect(args []string) (electArgs, error) {
	fs := newFlagSet("elect")
	conn := addConnFlags(fs)
	var a electArgs
	fs.Var(&a.value, "value", "")
	fs.StringVar(&a.onLoss, "on-loss", "exit", "")
	fs.Var(&a.wait, "wait", "")
	fs.Var(&a.wait, "w", "")
	fs.Var(newDurationFlag(&a.watchdog, cliWatchdogTimeout), "watchdog", "")
	fs.Var(newDurationFlag(&a.grace, 5*time.Second), "grace", "")
	fs.Var(&a.label, "label", "")
	fs.BoolVar(&a.verbose, "v", false, "")
	if defineHook != nil {
		defineHook(fs)
	}
	if err := c.parseFlags(fs, electUsage, args); err != nil {
		return a, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return a, usageError("elect: missing election NAME; %s", electSynopsis)
	}
	a.name = rest[0]
	if err := c.parseFlags(fs, electUsage, rest[1:]); err != nil {
		return a, err
	}
	a.argv = fs.Args()
	switch {
	case len(a.argv) == 0:
		return a, usageError("elect: missing COMMAND after NAME %q; %s", a.name, electSynopsis)
	case a.onLoss != "exit" && a.onLoss != "recampaign":
		return a, usageError("elect: --on-loss %q: want exit or recampaign", a.onLoss)
	case a.wait.set && a.wait.d <= 0:
		return a, usageError("elect: --wait must be positive")
	}
	if !a.value.set {
		host, _ := os.Hostname()
		a.value.s = host + ":" + strconv.Itoa(os.Getpid())
	}
	if !a.label.set {
		a.label.s = commandLabel(a.argv)
	}
	if a.verbose {
		c.log().verbose()
	}
	var err error
	if a.eps, err = c.endpoints(conn); err == nil && len(a.eps) > 1 {
		err = usageError("elect: one --redis deployment expected, got %d (an election is not a RedLock)", len(a.eps))
	}
	return a, err
}

func (c *cli) electCmd(ctx context.Context, args []string) error {
	a, err := c.parseElect(args)
	if err != nil {
		return err
	}
	start := time.Now()
	s, err := openSession(c.log(), a.eps, dlock.WithWatchdogTimeout(a.watchdog), dlock.WithClientName(a.label.s))
	if err != nil {
		return err
	}
	defer s.close()
	election, err := s.clients[0].NewElection(a.name)
	if err != nil {
		return optionError("elect", err)
	}
	if err := s.ping(ctx); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	for {
		leaderCtx, err := acquire(ctx, campaigner{election, a.value.s}, a.wait, start, sigs)
		if err != nil {
			return c.campaignError(a, err)
		}
		code, err := c.lead(s, election, a, leaderCtx, sigs)
		if err == nil {
			return &exitError{code: code}
		}
		if a.onLoss != "recampaign" {
			return err
		}
		fmt.Fprintf(c.stderr, "dlock: %s; campaigning again\n", trimPrefix(err))
		start, a.wait = time.Now(), optDuration{}
	}
}

// lead runs COMMAND while leaderCtx leads, and returns COMMAND's exit
// status once it exited and dlock resigned, or an exit error when the
// leadership was lost first (COMMAND was stopped).
func (c *cli) lead(s *session, e *dlock.Election, a electArgs, leaderCtx context.Context, sigs <-chan os.Signal) (int, error) {
	owner, _ := s.clients[0].Owner(leaderCtx)
	token, _ := dlock.Token(leaderCtx)
	vars := []string{"DLOCK_NAME=" + a.name, "DLOCK_OWNER=" + owner,
		"DLOCK_TOKEN=" + strconv.FormatInt(token, 10), "DLOCK_LEADER_VALUE=" + a.value.s}
	if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: elected leader of %q (token %d)\n", a.name, token)
	}
	env := append(withoutVars(os.Environ(), append(childEnv, "DLOCK_LEADER_VALUE")), vars...)
	ch, err := startChild(a.argv, env, c.stdin, c.stdout, c.stderr)
	if err != nil {
		_ = e.Resign(leaderCtx)
		return 0, err
	}
	for {
		select {
		case sig := <-sigs:
			ch.signal(sig.(syscall.Signal))
			continue
		case <-ch.done:
		case <-leaderCtx.Done():
			what := fmt.Sprintf("leadership of %q", a.name)
			return 0, c.lockLost(leaderCtx, what, a.argv[0], ch, a.grace, sigs)
		}
		break
	}
	code := ch.exitCode()
	if err := e.Resign(leaderCtx); err != nil {
		if errors.Is(err, dlock.ErrNotLeader) {
			return 0, exitf(exitLockLost, "leadership of %q was lost before %s exited (it exited with status %d)", a.name, a.argv[0], code)
		}
		fmt.Fprintf(c.stderr, "dlock: resigning %q: %v; the leadership ends when its lease runs out\n", a.name, trimPrefix(err))
	} else if a.verbose {
		fmt.Fprintf(c.stderr, "dlock: resigned leadership of %q; %s exited with status %d\n", a.name, a.argv[0], code)
	}
	return code, nil
}

// campaignError turns a failed campaign into an exit.
func (c *cli) campaignError(a electArgs, err error) error {
	var se signalError
	switch {
	case errors.As(err, &se):
		return exitf(exitSignalBase+int(se.sig), "elect: %v while campaigning for %q", se, a.name)
	case errors.Is(err, context.DeadlineExceeded):
		return exitf(exitNotObtained, "elect: not elected leader of %q within %v", a.name, a.wait.d)
	}
	return redisError(fmt.Sprintf("elect %q", a.name), err)
}

// campaigner is an Election as acquire (cmd_run.go) takes a lock: Lock
// campaigns with its value, Unlock resigns.
type campaigner struct {
	e     *dlock.Election
	value string
}

func (k campaigner) Lock(ctx context.Context) (context.Context, error) {
	return k.e.Campaign(ctx, k.value)
}
func (k campaigner) TryLock(ctx context.Context) (context.Context, error) {
	return k.e.Campaign(ctx, k.value) // elect has no --wait 0
}
func (k campaigner) Unlock(ctx context.Context) error { return k.e.Resign(ctx) }
func (k campaigner) ForceUnlock(context.Context) (bool, error) {
	return false, errors.New("an election is not force-unlocked")
}

// leaderArgs is a parsed dlock leader command line.
type leaderArgs struct {
	eps   []endpoint
	name  string
	watch bool
	json  bool
}

func (c *cli) parseLeader(args []string) (leaderArgs, error) {
	fs := newFlagSet("leader")
	conn := addConnFlags(fs)
	var a leaderArgs
	fs.BoolVar(&a.watch, "watch", false, "")
	fs.BoolVar(&a.json, "json", false, "")
	pos, err := c.parse(fs, leaderUsage, args)
	if err != nil {
		return a, err
	}
	if len(pos) != 1 {
		return a, usageError("leader: one election NAME expected, got %d arguments; usage: dlock leader [--watch] NAME", len(pos))
	}
	a.name = pos[0]
	if a.eps, err = c.endpoints(conn); err == nil && len(a.eps) > 1 {
		err = usageError("leader: one --redis deployment expected, got %d", len(a.eps))
	}
	return a, err
}

func (c *cli) leaderCmd(ctx context.Context, args []string) error {
	a, err := c.parseLeader(args)
	if err != nil {
		return err
	}
	s, err := openSession(c.log(), a.eps)
	if err != nil {
		return err
	}
	defer s.close()
	election, err := s.clients[0].NewElection(a.name)
	if err != nil {
		return optionError("leader", err)
	}
	if err := s.ping(ctx); err != nil {
		return err
	}
	if !a.watch {
		info, err := election.Leader(ctx)
		if err != nil && !errors.Is(err, dlock.ErrNoLeader) {
			return redisError(fmt.Sprintf("leader %q", a.name), err)
		}
		return c.printLeader(a, info)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	for info := range election.Observe(ctx) {
		if err := c.printLeader(a, info); err != nil {
			return err
		}
	}
	if ctx.Err() == nil {
		return exitf(exitFailure, "leader %q: watching stopped (the connection to Redis was closed)", a.name)
	}
	return nil
}

// leaderJSON is the --json form of a LeaderInfo.
type leaderJSON struct {
	Name    string `json:"name"`
	Leader  bool   `json:"leader"`
	Value   string `json:"value,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Program string `json:"program,omitempty"`
	Label   string `json:"label,omitempty"`
	Since   string `json:"since,omitempty"`
	Token   int64  `json:"token,omitempty"`
	Seq     int64  `json:"seq,omitempty"`
}

// leaderJSONOf is the --json form of election name's leader info (also
// dlock ui's).
func leaderJSONOf(name string, info dlock.LeaderInfo) leaderJSON {
	j := leaderJSON{Name: name, Leader: info.Owner != ""}
	if j.Leader {
		j.Value, j.Owner, j.Token, j.Seq = info.Value, info.Owner, info.Token, info.Seq
		j.Host, j.PID, j.Program, j.Label = info.Holder.Host, info.Holder.PID, info.Holder.Program, info.Holder.Name
		j.Since = info.Since.UTC().Format(time.RFC3339Nano)
	}
	return j
}

// printLeader prints one leader (or "no leader") line.
func (c *cli) printLeader(a leaderArgs, info dlock.LeaderInfo) error {
	if a.json {
		b, err := json.Marshal(leaderJSONOf(a.name, info))
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, string(b))
		return nil
	}
	if info.Owner == "" {
		fmt.Fprintf(c.stdout, "%s: no leader\n", a.name)
		return nil
	}
	who := fmt.Sprintf("%s pid %d", info.Holder.Host, info.Holder.PID)
	if info.Holder.Name != "" {
		who += " (" + info.Holder.Name + ")"
	}
	fmt.Fprintf(c.stdout, "%s: leader %q on %s, since %s (%s ago), token %d, revision %d, owner %s\n",
		a.name, info.Value, who, info.Since.Format(time.RFC3339), time.Since(info.Since).Round(time.Second), info.Token, info.Seq, info.Owner)
	return nil
}
