//go:build !unix

package sock

import "net"

// rawConn is none here: IO uses the connection's own Read and Write.
type rawConn struct{}

func (*rawConn) init(net.Conn) {}

func (*rawConn) ok() bool { return false }

func (*rawConn) read(c net.Conn, p []byte) (int, error) { return c.Read(p) }

func (*rawConn) write(c net.Conn, p []byte) (int, error) { return c.Write(p) }
