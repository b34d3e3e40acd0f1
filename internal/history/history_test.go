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
