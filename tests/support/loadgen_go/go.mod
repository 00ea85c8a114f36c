module homelab-edge/loadgen

// The compiled load generators of the lab: core (the schedule, lateness,
// percentiles, CPU accounting, kernel counters, the parts of the JSON record
// both print) and one command each, cmd/dnsgen (DNS queries) and cmd/tlsgen
// (TLS connections), with only what is protocol-specific.
//
// The standard library only: its syscall package has the socket, epoll,
// sendto and getrusage calls the generators need (epoll_pwait2, which it
// lacks, is one raw system call), crypto/tls the rest, so the build needs
// nothing from the module proxy.
go 1.22
