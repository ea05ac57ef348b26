//go:build e2e

package e2e

import (
	"testing"
	"time"
)

func TestSuite(t *testing.T) { time.Sleep(time.Millisecond) }
