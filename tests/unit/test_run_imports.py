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

LEGACY_ONLY = [
    "google.protobuf.descriptor_pb2",
    "linkerd_config.linkerd.formats.jsonpb",
    "linkerd_config.linkerd.formats.legacy.config_pb2",
]
"""What only a configuration of the legacy format needs (3.7 MiB with protobuf's
descriptor_pb2): a cluster of the values format never imports it."""

RENDER_LEGACY = """
from linkerd_config.linkerd.formats import FormatError, LegacyFormat, parse_version
try:
    LegacyFormat(parse_version("edge-19.12.3")).render({})
except FormatError:
    pass
"""

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
    watched = ON_DEMAND + LEGACY_ONLY
    code = f"WATCHED = {watched!r}\nANCHOR = {trust_anchor()!r}\n" + PROBE.format(then=then)
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


def test_the_legacy_formats_messages_are_imported_when_one_is_first_built() -> None:
    found = imports(RENDER_LEGACY)
    assert found["before"] == []
    # descriptor_pb2 comes with config_pb2 or, later, with a release's exact messages.
    assert set(LEGACY_ONLY) - set(found["after"]) <= {"google.protobuf.descriptor_pb2"}
