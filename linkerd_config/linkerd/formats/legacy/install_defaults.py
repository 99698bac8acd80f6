"""What ``linkerd install`` wrote in the legacy era, for fields a LinkerdConfig leaves out.

Checked against the edge-19.12.1 install in tests/fixtures: images under gcr.io/linkerd-io,
pull policy IfNotPresent (the original project wrote the pull policy into the image name and
the proxy image into the init image; each value here sits in its own field).
"""

from __future__ import annotations

from typing import Any, Final

LEGACY_DEFAULTS: Final[dict[str, Any]] = {
    "global": {
        "linkerdNamespace": "linkerd",
        "cniEnabled": False,
        "identityContext": {
            "trustDomain": "cluster.local",
            "issuanceLifeTime": "86400s",
            "clockSkewAllowance": "20s",
            "scheme": "linkerd.io/tls",
        },
        "omitWebhookSideEffects": False,
        "clusterDomain": "cluster.local",
        "configMap": "linkerd-config",
    },
    "proxy": {
        "proxyImage": {"name": "gcr.io/linkerd-io/proxy", "pullPolicy": "IfNotPresent"},
        "proxyInitImage": {"name": "gcr.io/linkerd-io/proxy-init", "pullPolicy": "IfNotPresent"},
        "adminPort": 4191,
        "controlPort": 4190,
        "inboundPort": 4143,
        "outboundPort": 4140,
        "ignoreInboundPorts": [],
        "ignoreOutboundPorts": [],
        "logLevel": "warn,linkerd2_proxy=info",
        "disableExternalProfiles": True,
        "proxyUID": 2102,
    },
}
