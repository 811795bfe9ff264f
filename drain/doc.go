// Package drain owns ebb's shutdown: the connection registry that knows
// every downstream connection, the controller that runs the drain timeline
// when a trigger arrives (a signal, the admin API, the watched application
// exiting), and the decision of when and how the process exits.
//
// The timeline is specified in design/DRAIN.md. This version implements its
// frame: triggers, readiness, a graceful stop bounded by drain.timeout, and
// the exit decision (drained, or forced at the deadline).
package drain
