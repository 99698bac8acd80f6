"""The local control plane: real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok on loopback, the envtest approach, for tests and the demo."""
