"""What ``linkerd-config run`` imports before it can be ready (issue 40: nothing on the path
to ready that ready does not need). Readiness is the caches synced; a certificate is first
read by the first reconcile, after it. So cryptography (17 ms, 8 MiB) and the servers only
the webhooks, HTTPS metrics or local conversion use are imported when asked for. Each case
runs in a fresh interpreter, as ``cli._run`` imports."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from linkerd_config.kube.tls import import_aiohttp_without_system_cas
import_aiohttp_without_system_cas()
import linkerd_config.app
before = sorted(m for m in sys.modules if m.split(".")[0] == "cryptography" or m in WATCHED)
{then}
after = sorted(m for m in sys.modules if m.split(".")[0] == "cryptography" or m in WATCHED)
print(json.dumps({{"before": before, "after": after}}))
"""

ON_DEMAND = [
    "linkerd_config.kube.admission",
    "linkerd_config.kube.certs",
    "linkerd_config.kube.local_conversion",
    "linkerd_config.linkerd.webhooks",
]

VALIDATE = """
import sys
sys.path.insert(0, ".")
from linkerd_config.linkerd import validation
from tests.support.anchors import trust_anchor
def errors(pem):
    spec = {"global": {"identityContext": {"trustAnchorsPEM": pem}}}
    obj = {"apiVersion": "config.linkerd.io/v1alpha2", "kind": "LinkerdConfig",
           "metadata": {"name": "x"}, "spec": spec}
    return [e for e in validation.validate(obj) if "rustAnchors" in e.field]
assert errors(trust_anchor()) == [], errors(trust_anchor())
(bad,) = errors("-----BEGIN CERTIFICATE-----\\nx\\n-----END CERTIFICATE-----")
assert "does not parse as X.509" in bad.message, bad
"""
"""What the first reconcile does with an anchor: validate it (a good one, and one that does
not parse, whose message comes from cryptography)."""


def imports(then: str) -> dict[str, list[str]]:
    code = f"WATCHED = {ON_DEMAND!r}\n" + PROBE.format(then=then)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="."
    )
    answer: dict[str, list[str]] = json.loads(done.stdout)
    return answer


def test_run_imports_neither_cryptography_nor_the_on_demand_servers() -> None:
    assert imports("")["before"] == []


def test_the_first_certificate_read_imports_cryptography() -> None:
    found = imports(VALIDATE)
    assert found["before"] == []
    assert "cryptography.x509" in found["after"]
