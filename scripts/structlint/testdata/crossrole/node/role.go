package node

import "example.com/m/node/internal/part"

// Config is the role's settings.
type Config struct{ Part part.Options }
