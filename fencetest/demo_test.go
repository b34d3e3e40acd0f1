package fencetest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the three acts against PostgreSQL and against Redis: each
// act fails the demo if it does not show what it is about (act 3: the
// stale holder's write refused).
func TestDemo(t *testing.T) {
	for _, store := range []string{"PostgreSQL", "Redis"} {
		t.Run(store, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out strings.Builder
			cfg := DemoConfig{RedisAddr: redisAddr, Watchdog: 500 * time.Millisecond, Out: &out}
			if store == "PostgreSQL" {
				db, _ := openDB(t)
				cfg.DB = db
			}
			err := RunDemo(ctx, cfg)
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
			if want := "refused by " + store; !strings.Contains(out.String(), want) {
				t.Errorf("the demo never says %q", want)
			}
		})
	}
}
