package cluster

import (
	"testing"
	"time"
)

func TestRole(t *testing.T) { time.Sleep(50 * time.Millisecond) }
