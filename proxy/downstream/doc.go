// Package downstream is ebb's connection layer: every connection a client
// opened to ebb's listeners, wrapped (Conn) and known to the Registry
// from accept to close. A Conn carries what the engines need of the
// connection beside its bytes: the client's address and peer, scratch
// space, write timeouts and the deadline skew; it recognizes a protocol
// by peeking at its first bytes, counts the bytes it moves, and closes
// with a lingering close when asked. Its protocol and state (new, active,
// idle, upgraded) are what the drain reads.
//
// The drain (package drain) acts through this layer and not the other
// way round: the Registry holds what the connections must know of a
// drain (whether one runs, the close signal given to each connection and
// passed on by its engine, the WebSocket and event-stream settings, the
// counts of what it did), and the idle close is a handshake between the
// controller (Registry.CloseIdle) and the goroutine reading the
// connection (idleclose.go).
package downstream
