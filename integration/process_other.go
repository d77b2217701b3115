//go:build !linux

package integration

import "syscall"

// sysProcAttr has no parent-death signal to offer outside Linux; children of
// a crashed test run must then be cleaned up by hand.
func sysProcAttr() *syscall.SysProcAttr { return nil }
