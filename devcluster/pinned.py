"""The pinned versions of every control-plane binary, in one place.

Changing a version here changes the cache key, so the next run builds afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

KUBERNETES = "1.34.4"
"""kube-apiserver, kube-controller-manager, kube-scheduler and kubectl."""

ETCD = "3.6.4"
"""The etcd release envtest pairs with Kubernetes 1.34."""

KWOK = "0.7.0"
"""The SIG's kubelet simulator: nodes on which scheduled pods become Running."""

HELM = "3.22.0"
"""``helm`` for the chart's lint, template and install tests (built from helm.sh/helm/v3)."""

PROMETHEUS = "2.53.4"
"""The Prometheus server and ``promtool`` the dashboard and alert tests run (the 2.53 long-term
support line), built from its Go module, which Prometheus tags v0.53.4 for 2.53.4."""

PROMETHEUS_OPERATOR = "0.85.0"
"""The Prometheus Operator module whose CRDs (PrometheusRule) the manifests tests create, as
the operator publishes them (``example/prometheus-operator-crd/``), fetched as a Go module."""

CERT_MANAGER = "1.21.2"
"""The cert-manager module whose CRDs (Issuer, Certificate) the manifests tests dry-run our
objects against (``deploy/crds/``), fetched as a Go module."""

KSTATUS = "0.37.2"
"""``sigs.k8s.io/cli-utils``, whose ``pkg/kstatus/status`` Helm 4's ``--wait`` reads status by."""

FLUX_SSA = "0.78.0"
"""``github.com/fluxcd/pkg/ssa``: the wait kustomize-controller runs for ``wait: true`` (on
Flux's kstatus fork, ``github.com/fluxcd/cli-utils``, which it requires)."""

GOPHER_LUA = "1.1.2"
"""``github.com/yuin/gopher-lua``: the Lua VM Argo CD runs health checks in."""

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


LINKERD_INJECTOR_PATCH = ("k8s.Pod, k8s.CJ}", "k8s.Pod}")
"""edge-19.12.3's proxy-injector watches CronJobs as ``batch/v1beta1``, which Kubernetes 1.25
removed, and serves only once every informer has synced: it never starts on 1.34. At build
time this one replacement drops that informer from ``controller/cmd/proxy-injector/main.go``;
``injector.Inject`` and ``webhook.Launch`` are Linkerd's, untouched."""


@dataclass(frozen=True)
class LinkerdRelease:
    """One Linkerd source release we build the real proxy injector (and CLI) from."""

    tag: str
    commit: str
    sha256: str
    """Of the ``git archive`` export ``linkerd2-<tag>.tar.gz`` (unpacks to ``linkerd2-<tag>/``)."""
    modern_config: bool
    """Reads Helm ``values`` and ``linkerd-identity-trust-roots`` (else ``global``/``proxy``)."""
    needs_cronjob_patch: bool = False
    builds_cli: bool = False

    @property
    def archive_name(self) -> str:
        return f"linkerd2-{self.tag}.tar.gz"


LINKERD_EDGE_19_12_3 = LinkerdRelease(
    "edge-19.12.3",
    "023fbcbf59230a8ad5c20d3df7e79eebfb54b2c5",
    "a4d17f3c11fb414659eecdf3b75737fb9dbcae371c6caa3afa2e9a31af93f92c",
    modern_config=False,
    needs_cronjob_patch=True,
)
"""The original README's target: its proxy reads ``global``/``proxy`` from linkerd-config."""

LINKERD_EDGE_26_8_3 = LinkerdRelease(
    "edge-26.8.3",
    "19a0d90d5a4a65e0b976f079ba8a5f1dab12c005",
    "3f3e9f851e37b4a2d73aa66ecbb172e0e8c85dab35e97872edab162aea252383",
    modern_config=True,
    builds_cli=True,
)
"""The newest release: Helm ``values`` plus the trust-roots ConfigMap, native sidecars."""

LINKERD_RELEASES = {r.tag: r for r in (LINKERD_EDGE_19_12_3, LINKERD_EDGE_26_8_3)}

LINKERD_REPOSITORY = "https://github.com/linkerd/linkerd2"
"""Cloned at a release tag when no local source is given (what a user with internet gets)."""


@dataclass(frozen=True)
class DataPlaneSource:
    """One pinned input of Linkerd's data plane: a ``git archive`` export (unpacked, renamed
    to the folder the recipe's patches expect) or a patch, by its sha256."""

    file: str
    sha256: str
    folder: str = ""
    """What the tarball is unpacked as (its top folder renamed), side by side with the rest."""


@dataclass(frozen=True)
class LinkerdDataPlane:
    """edge-26.8.3's data plane as ``../shared/vendor/linkerd2-dataplane/`` holds it: the
    sources, the patches and ``RECIPE.txt`` (every one by sha256), and the binaries that
    recipe built, whose sums its ``SHA256SUMS`` states."""

    release: LinkerdRelease
    proxy_version: str
    sources: tuple[DataPlaneSource, ...]
    binaries: tuple[str, ...]

    def source(self, file: str) -> DataPlaneSource:
        return next(s for s in self.sources if s.file == file)


LINKERD_DATAPLANE = LinkerdDataPlane(
    release=LINKERD_EDGE_26_8_3,
    proxy_version="2.366.0",
    sources=(
        DataPlaneSource(
            "linkerd2-proxy-v2.366.0.tar.gz",
            "d3dd28526e864c6ce44242574d939760fa81337e53765799cae866a1bd16114b",
            "linkerd2-proxy",
        ),
        DataPlaneSource(
            "linkerd-kubert-cb414cc.tar.gz",
            "2b50c9b054f67628ac3d071da89b2b5faad7414d113ec7bba9c5cb992c8b4464",
            "kubert-cb414cc",
        ),
        DataPlaneSource(
            "linkerd-kubert-04f6ac3.tar.gz",
            "a3a3befc703657133b3fe7f953b2bccad55aca3ec0d1ef61e5a709bc1e69f83a",
            "kubert-04f6ac3",
        ),
        DataPlaneSource(
            "linkerd2-proxy-init-v2.4.9.tar.gz",
            "086daffa03205c1453a8642dad1d96da81fd6ea612332cd5489882daf57c5a03",
            "linkerd2-proxy-init",
        ),
        DataPlaneSource(
            "linkerd2-proxy-v2.366.0.patch",
            "d08c206259c10bb8a4e7544e6ad2f4c2271baaf7e21bbbc53c404ec4249bf4d1",
        ),
        DataPlaneSource(
            "linkerd2-edge-26.8.3-policy-controller.patch",
            "c2325fd92d6e856b657be4c51b6c9dfaa51d3290e02788e355216ccd87e1aa47",
        ),
        DataPlaneSource(
            "RECIPE.txt", "4cffdac95d0d01037b80b37fc62c902c274b59385422aed443bd05b072b645e5"
        ),
    ),
    binaries=(
        "linkerd2-proxy",
        "linkerd2-proxy-identity",
        "linkerd2-proxy-init",
        "linkerd-policy-controller",
    ),
)
"""linkerd2-proxy ``release/v2.366.0`` (edge-26.8.3's ``.proxy-version``), linkerd-kubert at
the two commits the Cargo.lock files name, linkerd2-proxy-init ``proxy-init/v2.4.9``
(edge-26.8.3's ``Dockerfile.proxy``); the policy controller and proxy-identity come from the
edge-26.8.3 release itself."""
