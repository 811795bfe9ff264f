// Package drain owns ebb's shutdown: the controller that runs the drain
// timeline when a trigger arrives (a signal, the admin API, the watched
// application exiting) over the connections package proxy/downstream
// knows, the decision of when and how the process exits, and the
// record of each drain (Timeline: its phases and a sample every
// SampleInterval, served by the admin server, shown by `ebb drain -wait`
// and written by drain.report as JSON or as an HTML page).
//
// The timeline is specified in docs/DRAIN.md.
package drain
