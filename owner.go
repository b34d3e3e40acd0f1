package dlock

import "context"

// Owner returns the owner name carried by ctx, a lock context returned by
// a lock of c (or a context derived from one): "<clientID>:<n>", the hash
// field under which the owner's holds are counted, in the shape of
// Redisson's "<uuid>:<threadId>". ok is false when ctx carries no owner of
// c. Tools use it to tell a holder which entry in Redis is its own, for
// example to pass it to a child process.
func (c *Client) Owner(ctx context.Context) (owner string, ok bool) {
	if c == nil || ctx == nil {
		return "", false
	}
	return ownerFrom(ctx, c)
}
