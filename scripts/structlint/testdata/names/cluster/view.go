package cluster

// Options are allowed to repeat; Verdict is not.
type Verdict struct{ Deny string }
