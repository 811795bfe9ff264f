// Package upstream is ebb's side of the exchange with an endpoint: the
// HTTP/1.1 transport on fasthttp's connection pool (H1, in cleartext or,
// for the endpoints of auto clusters that speak HTTP/1.1, over TLS, with
// RoundTripHTTP carrying requests in net/http's form; HTTP/2 upstreams
// are package h2client's), the connection wrapper that knows what a
// request cost (Conn), the client's request body on its way up (Body,
// with one Attempt per try of an exchange in net/http's form), and the
// failure kinds (Kind, Error) from which the retry policy and the status
// a client sees are decided.
//
// It knows endpoints by address only: which endpoint to use, and whether
// to try another, is package cluster's choice.
package upstream
