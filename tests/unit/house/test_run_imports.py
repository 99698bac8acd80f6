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
from linkerd_config.kube.tls import import_aiohttp_lean
import_aiohttp_lean()
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
    "linkerd_config.linkerd.admission.webhooks",
]

LEGACY_ONLY = [
    "google.protobuf.descriptor_pb2",
    "linkerd_config.linkerd.formats.jsonpb",
    "linkerd_config.linkerd.formats.legacy.config_pb2",
]
"""What only a configuration of the legacy format needs: a cluster of the values format never
imports it, and neither imports protobuf's descriptor_pb2."""

RENDER_LEGACY = """
import yaml
from linkerd_config.linkerd.formats import LegacyFormat, parse_version
with open("manifests/samples/edge_19.12.3.yaml") as f:
    spec = yaml.safe_load(f)["spec"]
rendered = LegacyFormat(parse_version("edge-19.12.3")).render(spec)
assert sorted(rendered) == ["global", "proxy"], rendered
assert '"proxyImage":{"imageName":' in rendered["proxy"], rendered
"""

VALIDATE = """
from linkerd_config.linkerd.admission import validation
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

DECODE_PODS = """
from linkerd_config.kube import protobuf_wire as pw
from linkerd_config.linkerd import mesh
listed = pw.types().message("k8s.io.apimachinery.pkg.apis.meta.v1.PartialObjectMetadataList")()
meta = listed.items.add().metadata
meta.name, meta.namespace = "web-1", "shop"
meta.labels["config.linkerd.io/reconcile"] = "auto"
unknown = pw.types().message("k8s.io.apimachinery.pkg.runtime.Unknown")()
unknown.typeMeta.apiVersion = "meta.k8s.io/v1"
unknown.typeMeta.kind = "PartialObjectMetadataList"
unknown.raw = listed.SerializeToString()
reader = pw.ListReader(mesh.running_pod_metadata.fields_read)
reader.feed(pw.MAGIC + unknown.SerializeToString())
(pod,) = reader.result()["items"]
assert pod["metadata"]["labels"] == {"config.linkerd.io/reconcile": "auto"}, pod
"""
"""What the informers' first lists do: decode a page of pods from protobuf, its labels a map."""


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
    # A release's exact messages are cut from config_pb2's descriptor by hand, and map
    # fields told from it too: descriptor_pb2 is never imported (1.2 MiB).
    assert found["after"] == sorted(set(LEGACY_ONLY) - {"google.protobuf.descriptor_pb2"})


def test_decoding_a_protobuf_list_imports_no_descriptor_pb2() -> None:
    # Asking a descriptor for its options (is it a map's entry?) would import it: 1.2 MiB.
    found = imports(DECODE_PODS)
    assert found["before"] == []
    assert found["after"] == []


def test_the_command_line_imports_no_aiohttp_before_run_asks_for_it_lean() -> None:
    # ``cli._run`` imports aiohttp by ``import_aiohttp_lean`` (without the two client SSL
    # contexts that load the system CA bundle, about 35 ms): nothing ``cli`` imports at its
    # top (the settings, the logging) may import aiohttp first, or the lean import does
    # nothing. The logging's filter of malformed requests once did.
    code = (
        "import sys, linkerd_config.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith('aiohttp')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="."
    )
    assert done.stdout.strip() == "[]"
