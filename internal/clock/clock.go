// Package clock is dlock's seam on the local wall clock. dlock's locks do
// not read it for anything that matters (lease deadlines are on Go's
// monotonic clock, the fair lock's waiter deadlines and the
// PermitSemaphore's permit expiries on the server's TIME). The
// PermitSemaphore still sends the client's wall-clock time to its scripts,
// where Redisson's RPermitExpirableSemaphore sends it, and reads it
// through Offset, so that the verify/ harness can jump one client's clock
// without changing the machine's (libfaketime does not reach Go programs,
// which read the clock through the vDSO) and show that the jump changes
// nothing: the scripts do not read it. Outside the harness the offset
// stays 0.
package clock

import (
	"sync/atomic"
	"time"
)

var offset atomic.Int64

// Offset returns how far Jump has moved this process's wall clock as
// dlock reads it.
func Offset() time.Duration { return time.Duration(offset.Load()) }

// Jump moves this process's wall clock, as dlock reads it, by d (back when
// d is negative), as a clock step (NTP, a VM resumed, an operator) would.
func Jump(d time.Duration) { offset.Add(int64(d)) }
