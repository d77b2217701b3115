package integration

import "syscall"

// sysProcAttr has the kernel SIGKILL our children when the test binary dies
// (a test time-out panic, a crash), so no broker or pipeline outlives the
// run holding its port and data dir.
//
// Pdeathsig fires when the OS thread that started the child exits, not the
// process; Go only ends threads whose goroutine exits while locked to them,
// which nothing in this package does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
