package history

import (
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		holds []Hold
		want  []string
	}{
		{"sequential", []Hold{{Owner: "a", Acquired: 1, Released: 2, Token: 1}, {Owner: "b", Acquired: 3, Released: 4, Token: 2}}, nil},
		{"touching", []Hold{{Owner: "a", Acquired: 1, Released: 3}, {Owner: "b", Acquired: 3, Released: 4}}, nil},
		{"overlap", []Hold{{Owner: "a", Acquired: 1, Released: 5}, {Owner: "b", Acquired: 3, Released: 4}}, []string{"overlap"}},
		{"same owner may nest", []Hold{{Owner: "a", Acquired: 1, Released: 5}, {Owner: "a", Acquired: 2, Released: 3}}, nil},
		{"long hold overlaps a later one", []Hold{
			{Owner: "a", Acquired: 1, Released: 10}, {Owner: "b", Acquired: 2, Released: 3}, {Owner: "c", Acquired: 4, Released: 5},
		}, []string{"overlap", "overlap"}},
		{"stale token", []Hold{{Owner: "a", Acquired: 1, Released: 2, Token: 5}, {Owner: "b", Acquired: 3, Released: 4, Token: 4}}, []string{"token not increasing"}},
		{"reentrant token", []Hold{{Owner: "a", Acquired: 1, Released: 4, Token: 5}, {Owner: "a", Acquired: 2, Released: 3, Token: 6}, {Owner: "b", Acquired: 5, Released: 6, Token: 7}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.holds)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i, v := range got {
				if v.Reason != tc.want[i] {
					t.Errorf("violation %d: %s, want %s", i, v.Reason, tc.want[i])
				}
			}
		})
	}
}

func TestRecordRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	r, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	in := []Hold{{Owner: "a", Acquired: Now(), Released: Now(), Token: 3}, {Owner: "b", Acquired: Now(), Released: Now(), Lost: true}}
	for _, h := range in {
		if err := r.Add(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := Read(path)
	if err != nil || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("Read = %v, %v", out, err)
	}
	if in[0].Acquired > in[1].Acquired {
		t.Error("CLOCK_MONOTONIC went backwards")
	}
}

func TestStaleWrites(t *testing.T) {
	w := func(owner string, token, start, end int64, accepted bool) Hold {
		return Hold{Owner: owner, Token: token, WriteStart: start, WriteEnd: end, Accepted: accepted}
	}
	for _, tc := range []struct {
		name                string
		holds               []Hold
		attempted, accepted int
	}{
		{"in order", []Hold{w("a", 1, 1, 2, true), w("b", 2, 3, 4, true)}, 0, 0},
		{"older refused", []Hold{w("b", 2, 1, 2, true), w("a", 1, 3, 4, false)}, 1, 0},
		{"older accepted", []Hold{w("b", 2, 1, 2, true), w("a", 1, 3, 4, true)}, 1, 1},
		{"token reused", []Hold{w("b", 2, 1, 2, true), w("a", 2, 3, 4, true)}, 1, 1},
		{"concurrent writes are not stale", []Hold{w("b", 2, 1, 5, true), w("a", 1, 3, 4, true)}, 0, 0},
		{"refused writes set no bar", []Hold{w("b", 9, 1, 2, false), w("a", 1, 3, 4, true)}, 0, 0},
		{"no write", []Hold{w("b", 2, 1, 2, true), {Owner: "a", Token: 1}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempted, accepted := StaleWrites(tc.holds)
			if attempted != tc.attempted || accepted != tc.accepted {
				t.Errorf("StaleWrites = %d, %d; want %d, %d", attempted, accepted, tc.attempted, tc.accepted)
			}
		})
	}
}
