module linkerd-config.local/testapp

go 1.24.0
