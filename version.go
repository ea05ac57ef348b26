package main

// version is the release main carries, kept in the tree because a clone
// carries no tags: it moves with the chart's version and appVersion
// (TestVersionIsTheChartsAppVersion). commit is the build's, stamped by
// make; -ldflags "-X main.version=..." builds another release's.
var (
	version = "v0.2.0"
	commit  = "unknown"
)
