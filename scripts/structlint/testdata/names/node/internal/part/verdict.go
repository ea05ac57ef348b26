package part

// Verdict says what the part decided.
type Verdict struct{ Keep bool }
