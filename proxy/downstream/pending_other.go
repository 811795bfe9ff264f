//go:build !unix

package downstream

// pending is always false where the socket cannot be peeked at.
func (c *Conn) pending() bool { return false }
