package main

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// embeddedServer is the demo's server when no redis-server is on PATH: an
// in-process Redis-compatible server (miniredis) on a free loopback port,
// whose keys expire as time passes, as on Redis (miniredis's default
// expires them only when told to: the crash scene would never end). The
// demo's scenes use nothing it lacks: one server, Lua scripts, pub/sub,
// PUBSUB NUMSUB, PTTL, LLEN, SCAN. The library never imports it; only
// this command does (dlocktest is the kit for tests).
func embeddedServer() (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("starting the embedded server: %w", err)
	}
	return m, nil
}
