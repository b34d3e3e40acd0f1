package scripts

import _ "embed"

var (
	//go:embed client_exists.lua
	clientExists string
	//go:embed client_seen.lua
	clientSeen string
)

// Holder record checks that tell a dead fair waiter (fair.go): scripts,
// not plain reads, so that they run on the master. The record and the
// seen set are in different slots on a cluster, so they are two scripts.
var (
	ClientExists = newScript(clientExists)
	ClientSeen   = newScript(clientSeen)
)
