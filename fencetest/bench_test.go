package fencetest

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// BenchmarkSQLWrite measures what dlock.CheckToken adds to a transaction
// that updates one row: "plain" is BEGIN, UPDATE, COMMIT; "checked" adds
// the fence upsert before the UPDATE. Each op takes a new, higher token,
// as a new holder would. The numbers go to docs/safety.md; nothing is
// asserted.
//
//	cd fencetest && go test -run '^$' -bench SQLWrite -benchtime 3000x
func BenchmarkSQLWrite(b *testing.B) {
	ctx := context.Background()
	db, fence := openDB(b)
	token := time.Now().UnixMicro()
	for _, checked := range []bool{false, true} {
		name := "plain"
		if checked {
			name = "checked"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				token++
				var err error
				if checked {
					err = write(ctx, db, fence, dlock.Fence{Token: token, Holder: "bench"}, "v")
				} else {
					err = plainWrite(ctx, db, fence, "v")
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
