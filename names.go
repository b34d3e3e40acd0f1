package dlock

import (
	"fmt"

	"github.com/dlock-go/dlock/internal/layout"
)

// validateName rejects names that Redis or a cluster cannot serve as one
// lock (ErrInvalidName): empty, too long, or such that Redisson's naming
// rule would put a companion key in another hash slot (names like "a}b" or
// "x{}"). The key layout itself lives in internal/layout.
func validateName(name string) error {
	if err := layout.CheckName(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	return nil
}
