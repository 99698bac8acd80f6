"""What ``linkerd-config run`` imports before it can be ready (issue 40: nothing on the path
to ready that ready does not need), and what its reconciles import after. Readiness is the
caches synced; the servers only the webhooks, HTTPS metrics or local conversion use are
imported when asked for. cryptography (17 ms, 7-8 MiB) is not imported by a run at all: the
first reconcile, as the caches fill, reads trust anchors with ``kube.x509_reader``. Each case
runs in a fresh interpreter, as ``cli._run`` imports."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.anchors import trust_anchor

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
from linkerd_config.linkerd import validation
def errors(pem):
    spec = {"global": {"identityContext": {"trustAnchorsPEM": pem}}}
    obj = {"apiVersion": "config.linkerd.io/v1alpha2", "kind": "LinkerdConfig",
           "metadata": {"name": "x"}, "spec": spec}
    return [e for e in validation.validate(obj) if "rustAnchors" in e.field]
assert errors(ANCHOR) == [], errors(ANCHOR)
(bad,) = errors("-----BEGIN CERTIFICATE-----\\nx\\n-----END CERTIFICATE-----")
assert "does not parse as X.509" in bad.message, bad
"""
"""What the first reconcile does with an anchor: validate it (a good one, and one that does
not parse)."""


def imports(then: str) -> dict[str, list[str]]:
    code = f"WATCHED = {ON_DEMAND!r}\nANCHOR = {trust_anchor()!r}\n" + PROBE.format(then=then)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="."
    )
    answer: dict[str, list[str]] = json.loads(done.stdout)
    return answer


def test_run_imports_neither_cryptography_nor_the_on_demand_servers() -> None:
    assert imports("")["before"] == []


def test_reading_certificates_imports_no_cryptography() -> None:
    found = imports(VALIDATE)
    assert found["before"] == []
    assert found["after"] == []
