package scripts

import _ "embed"

var (
	//go:embed election_common.lua
	electionCommon string
	//go:embed election_elect.lua
	electionElect string
	//go:embed election_proclaim.lua
	electionProclaim string
	//go:embed election_keep.lua
	electionKeep string
	//go:embed election_end.lua
	electionEnd string
	//go:embed election_read.lua
	electionRead string
)

// Leader election scripts (dlock's own; the election's lock is a reentrant
// lock taken with LockAcquire). ElectionElect and ElectionProclaim start
// with election_common.lua.
var (
	ElectionElect    = newScript(electionCommon + electionElect)
	ElectionProclaim = newScript(electionCommon + electionProclaim)
	ElectionKeep     = newScript(electionKeep)
	ElectionEnd      = newScript(electionEnd)
	ElectionRead     = newScript(electionRead)
)
