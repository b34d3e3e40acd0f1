//go:build !dlock_broken_handover

package dlock

// handOverSeqChecked says that a waiter checks a hand-over message's
// sequence against its latest attempt that found the lock taken
// (handedOver). Building with the tag dlock_broken_handover turns the
// check off: the negative control of verify/'s fair-lock rows, which the
// checker must catch granting the lock twice.
const handOverSeqChecked = true
