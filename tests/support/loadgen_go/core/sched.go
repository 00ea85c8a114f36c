package core

// Real-time scheduling for the generator, when asked (-fifo N): a busy
// machine's other tasks then cannot hold the sender off its schedule (under
// the ordinary policy a woken sender may wait milliseconds for its CPU). The
// generator still sleeps between queries and its CPU share is a validity
// rule, so it leaves the CPU to others most of the time; the kernel's RT
// throttling (95 % by default) bounds it whatever happens.
//
// Every thread of the process gets the policy, not the main one alone: Go
// moves goroutines between its threads (a preempted one resumes wherever the
// scheduler runs next), and a real-time sender waiting on an ordinary thread
// would wait as long as an ordinary sender. Threads Go starts later inherit
// it from the thread that starts them.

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

const schedFIFO = 1

// SetFIFO puts every thread under SCHED_FIFO at `prio` (0: leaves them as
// started) and says what the process runs under; a refusal is said, not
// fatal (the lateness figures then show what the machine did to the sender).
func SetFIFO(prio int) string {
	if prio == 0 {
		return SchedNow()
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Sprintf("%s (SCHED_FIFO %d not set: %v)", SchedNow(), prio, err)
	}
	param := int32(prio)
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedFIFO, uintptr(unsafe.Pointer(&param)))
		if e != 0 {
			return fmt.Sprintf("%s (SCHED_FIFO %d refused: %v)", SchedNow(), prio, e)
		}
	}
	return SchedNow()
}

// SchedNow is this thread's policy and priority, as sched(7) names them.
func SchedNow() string {
	policy, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	if e != 0 {
		return "unknown"
	}
	var param int32
	syscall.RawSyscall(syscall.SYS_SCHED_GETPARAM, 0, uintptr(unsafe.Pointer(&param)), 0)
	names := map[uintptr]string{0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE"}
	if param > 0 {
		return fmt.Sprintf("%s %d", names[policy], param)
	}
	return names[policy]
}
