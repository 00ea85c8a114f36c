module homelab-edge/dnsgen

// The standard library only: its syscall package has the socket, epoll,
// sendto and getrusage calls the generator needs (epoll_pwait2, which it
// lacks, is one raw system call), so the build needs nothing from the
// module proxy.
go 1.22
