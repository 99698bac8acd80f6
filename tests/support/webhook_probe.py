"""Whether our validating webhook is in effect: the API server calls it only a moment after
its configuration is registered, and the schema now refuses most bad values itself, so the
probe is one only the webhook refuses (an expired trust anchor) and the answer must be the
webhook's own denial."""

from __future__ import annotations

import copy
import uuid

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support.samples import SAMPLES, load

DENIED = 'admission webhook "vlinkerdconfig.config.linkerd.io" denied the request'
"""How the API server words our validating webhook's refusal."""
_PROBE = load(SAMPLES / "invalid" / "expired_trust_anchor.yaml")


async def webhook_in_effect(kube: KubeClient) -> bool:
    """A dry-run create of the probe (nothing is stored) is denied by our webhook."""
    probe = copy.deepcopy(_PROBE)
    probe["metadata"] = {"name": f"probe-{uuid.uuid4().hex[:6]}"}
    try:
        await kube.request(
            "POST", LINKERD_CONFIGS.path(), body=probe, params={"dryRun": "All"}, fenced=False
        )
    except ApiError as exc:
        return DENIED in exc.message
    return False
