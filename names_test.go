package dlock

import "github.com/dlock-go/dlock/internal/layout"

// Short names for the key layout in this package's tests; the layout
// itself lives in internal/layout.
var (
	prefixName    = layout.Prefixed
	suffixName    = layout.Suffixed
	slot          = layout.Slot
	releaseLatch  = layout.UnlockLatch
	hashTag       = layout.HashTag
	holdKeyPrefix = layout.ReadHoldPrefix
)

const (
	maxNameLen         = layout.MaxNameLen
	channelPrefix      = layout.LockChannelPrefix
	rwChannelPrefix    = layout.RWChannelPrefix
	tokenPrefix        = layout.TokenPrefix
	fairQueuePrefix    = layout.QueuePrefix
	fairDeadlinePrefix = layout.TimeoutPrefix
	clientRecordPrefix = layout.ClientRecordPrefix
	recordHost         = layout.RecordHost
	recordPID          = layout.RecordPID
	recordProgram      = layout.RecordProgram
	recordName         = layout.RecordName
	recordStarted      = layout.RecordStarted
)
