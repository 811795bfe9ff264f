package upstream

// TestHookChecked runs after a pooled connection was checked and found
// open, before a request that is not idempotent is written on it.
var TestHookChecked = &testHookChecked
