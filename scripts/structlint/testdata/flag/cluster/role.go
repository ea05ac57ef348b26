package cluster

// Config is the role's settings.
type Config struct{ Size int }
