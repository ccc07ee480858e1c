// Command pause is the pod sandbox's process on the test bed's node (testbed.cluster): it holds
// the pod's namespaces until it is told to stop, and reaps the children it inherits as PID 1.
// The upstream pause image would need a registry; this one is built and imported locally.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
