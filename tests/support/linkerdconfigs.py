"""LinkerdConfig objects for the reconcile's unit tests: ``config``, edge-19.12.3's sample
(written in the legacy format) named, dated and with ``spec.global`` fields set; ``small``, one
that states only a proxy version and log level (the tests put it on Linkerd edge-26.8.3's
install, whose format is Helm values)."""

from __future__ import annotations

import copy
from typing import Any

from linkerd_config.kube.resource import Json
from tests.support.samples import sample


def config(name: str = "edge-19.12.3", created: str = "2026-01-01T00:00:00Z", **spec: Any) -> Json:
    obj = copy.deepcopy(sample("edge_19.12.3.yaml"))
    obj["metadata"].update(name=name, creationTimestamp=created, generation=1)
    obj["spec"]["global"].update(spec)
    return obj


def small(**proxy: Any) -> Json:
    spec = {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug", **proxy}}
    meta = {"name": "modern", "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1}
    return {"apiVersion": "config.linkerd.io/v1alpha1", "kind": "LinkerdConfig",
            "metadata": meta, "spec": spec}  # fmt: skip
