//go:build dlock_broken_handover

package dlock

// handOverSeqChecked is off in this build: a deliberately broken client
// for verify/'s negative control (see fair_seq.go). Never ship it.
const handOverSeqChecked = false
