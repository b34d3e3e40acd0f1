package verify

import (
	"context"
	"testing"
)

// TestFencedRegister: with the check the register refuses a token lower
// than the highest it accepted, and one equal to it from another holder
// (the same token granted twice in a split brain), as dlock's FencedSet
// does, and counts both stale; the same holder may write again. Without
// the check (the negative control) it accepts and counts every stale write.
func TestFencedRegister(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	n, err := NewNet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	topo, err := StartTopology(ctx, n, t.TempDir(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	rdb := topo.Client(topo.Resource.Addr(redisPort))
	defer rdb.Close()
	for _, c := range []struct {
		check           string
		key             string
		wantAccepted    []int64
		attempted, accd string
		equal           string
	}{
		{"1", "checked", []int64{1, 1, 0, 0, 1, 1}, "2", "", "1"},
		// 7 by c is let in, so 7 by b is stale too.
		{"0", "unchecked", []int64{1, 1, 1, 1, 1, 1}, "3", "3", "2"},
	} {
		writes := []struct {
			tok   int64
			owner string
		}{{5, "a"}, {7, "b"}, {6, "a"}, {7, "c"}, {7, "b"}, {8, "a"}}
		for i, w := range writes {
			got, err := fencedWrite.Run(ctx, rdb, []string{c.key}, w.tok, c.check, w.owner).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if got != c.wantAccepted[i] {
				t.Errorf("%s: write %d (token %d by %s): accepted %d, want %d", c.key, i, w.tok, w.owner, got, c.wantAccepted[i])
			}
		}
		reg, err := rdb.HGetAll(ctx, c.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if reg["equal_attempted"] != c.equal {
			t.Errorf("%s: %q stale writes with an equal token, want %s", c.key, reg["equal_attempted"], c.equal)
		}
		if reg["stale_attempted"] != c.attempted || reg["stale_accepted"] != c.accd {
			t.Errorf("%s: stale writes attempted %q accepted %q, want %s and %s", c.key, reg["stale_attempted"], reg["stale_accepted"], c.attempted, c.accd)
		}
	}
}
