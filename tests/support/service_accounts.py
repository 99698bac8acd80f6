"""Acting as a ServiceAccount on a local control plane: a token from the TokenRequest API and
a kubeconfig that presents it (what a pod's mounted token gives the controller in a cluster)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import SERVICE_ACCOUNTS


async def token(kube: KubeClient, namespace: str, name: str, seconds: int = 3600) -> str:
    review = await kube.request(
        "POST",
        SERVICE_ACCOUNTS.path(namespace, name, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        },
    )
    value: str = review["status"]["token"]
    return value


def kubeconfig(
    path: Path, cp: LocalControlPlane, user: str, bearer: str, namespace: str | None = None
) -> Path:
    context: dict[str, str] = {"cluster": "local", "user": user}
    if namespace:
        context["namespace"] = namespace
    ca = base64.b64encode(cp.ca_pem).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {"server": cp.server, "certificate-authority-data": ca},
                    }
                ],
                "users": [{"name": user, "user": {"token": bearer}}],
                "contexts": [{"name": user, "context": context}],
                "current-context": user,
            }
        )
    )
    return path
