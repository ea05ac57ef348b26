//go:build linux

package cluster

import (
	"testing"
	"time"
)

func TestOnLinux(t *testing.T) { time.Sleep(time.Millisecond) }
