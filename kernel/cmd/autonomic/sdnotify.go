package main

import (
	"net"
	"os"

	"github.com/autonomic-kernel/autonomic/kernel/server"
)

// notifier tells the service manager the kernel's state ("READY=1",
// "STOPPING=1") when serve runs as a Type=notify unit
// (config/systemd/autonomic.service); without NOTIFY_SOCKET it does
// nothing.
type notifier struct{ addr string }

// takeNotifier reads NOTIFY_SOCKET and removes it from the environment:
// the kernel's children (git, sudo and the launcher, verification runners)
// must not be able to tell systemd that the kernel is ready or stopping.
func takeNotifier() notifier {
	addr := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	switch {
	case addr == "":
	case addr[0] == '@': // an abstract socket
		addr = "\x00" + addr[1:]
	case addr[0] != '/': // systemd hands out no other kind
		addr = ""
	}
	return notifier{addr: addr}
}

// send reports whether the message was delivered.
func (n notifier) send(state string) bool {
	if n.addr == "" {
		return false
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err == nil
}

// serveHooks are serve's production hooks: readiness once the operator
// API answers.
func serveHooks(n notifier) server.Hooks {
	return server.Hooks{Ready: func() { n.send("READY=1") }}
}
