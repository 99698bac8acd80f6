"""The pinned versions of every control-plane binary, in one place.

Changing a version here changes the cache key, so the next run builds afresh.
"""

from __future__ import annotations

KUBERNETES = "1.34.4"
"""kube-apiserver, kube-controller-manager, kube-scheduler and kubectl."""

ETCD = "3.6.4"
"""The etcd release envtest pairs with Kubernetes 1.34."""

KWOK = "0.7.0"
"""The SIG's kubelet simulator: nodes on which scheduled pods become Running."""

GO_DIRECTIVE = "1.24.0"
"""Copied from Kubernetes' go.mod with its godebug line, so runtime defaults match upstream."""

KUBERNETES_STAGING_MODULES: tuple[str, ...] = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
)
"""Kubernetes' go.mod points these at ./staging; each is published as v0.X.Y."""
