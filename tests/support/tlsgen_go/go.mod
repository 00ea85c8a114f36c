module tlsgen

// The standard library only (crypto/tls, net, syscall), so the build needs
// nothing from the module proxy.
go 1.22
