"""Linkerd's data plane in the local control plane, the parts that need no cluster: the
prebuilt binaries used only when every sum agrees with the pins, the images' layers (file
capabilities as ``setcap`` writes them) and their one OCI layout, the cluster DNS's answers,
and what ``linkerd install`` is told."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from devcluster import cluster_dns, linkerd_binaries, linkerd_control_plane, pinned, real_node
from devcluster.binaries import BinaryUnavailableError
from devcluster.pinned import DataPlaneSource, LinkerdDataPlane
from tests.support.anchors import identity_issuer, identity_pki, signing_anchor


def _vendor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A vendor folder as ../shared/vendor/linkerd2-dataplane, its pins patched to match."""
    vendor = tmp_path / "vendor"
    (vendor / "bin").mkdir(parents=True)
    sources = []
    lines = []
    for name in ("linkerd2-proxy-v9.tar.gz", "fix.patch", "RECIPE.txt"):
        (vendor / name).write_bytes(name.encode())
        digest = hashlib.sha256(name.encode()).hexdigest()
        sources.append(DataPlaneSource(name, digest))
        lines.append(f"{digest}  {name}")
    for name in ("linkerd2-proxy", "linkerd-policy-controller"):
        data = b"\x7fELF " + name.encode()
        (vendor / "bin" / name).write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  bin/{name}")
    (vendor / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    plane = LinkerdDataPlane(
        pinned.LINKERD_EDGE_26_8_3,
        "9.0.0",
        tuple(sources),
        ("linkerd2-proxy", "linkerd-policy-controller"),
    )
    monkeypatch.setattr(pinned, "LINKERD_DATAPLANE", plane)
    monkeypatch.setenv("LINKERD_CONFIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(linkerd_binaries.DATAPLANE_ENV, str(vendor))
    return vendor


def test_prebuilt_binaries_whose_sums_agree_are_copied_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor = _vendor(tmp_path, monkeypatch)
    assert linkerd_binaries.prebuilt_problem(vendor) is None
    found = linkerd_binaries.ensure_dataplane(progress=lambda _: None)
    assert set(found) == {"linkerd2-proxy", "linkerd-policy-controller"}
    for name, path in found.items():
        assert path.parent == linkerd_binaries.dataplane_bin_dir()
        assert path.read_bytes() == (vendor / "bin" / name).read_bytes()
        assert path.stat().st_mode & 0o777 == 0o755
    # Cached: a second call copies nothing (the vendor folder may even be gone).
    (vendor / "bin" / "linkerd2-proxy").unlink()
    assert linkerd_binaries.ensure_dataplane(progress=lambda _: None) == found


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        (lambda v: (v / "bin" / "linkerd2-proxy").write_bytes(b"other"), "bin/linkerd2-proxy does"),
        (lambda v: (v / "fix.patch").write_text("other"), "fix.patch does not have its pinned"),
        (lambda v: (v / "RECIPE.txt").unlink(), "RECIPE.txt is missing"),
        (
            lambda v: (v / "SHA256SUMS").write_text(
                "\n".join(
                    line
                    for line in (v / "SHA256SUMS").read_text().splitlines()
                    if "bin/linkerd-policy" not in line
                )
            ),
            "does not state bin/linkerd-policy-controller",
        ),
        (lambda v: (v / "SHA256SUMS").unlink(), "no SHA256SUMS"),
    ],
)
def test_prebuilt_binaries_are_refused_when_any_sum_disagrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: object, problem: str
) -> None:
    vendor = _vendor(tmp_path, monkeypatch)
    spoil(vendor)  # type: ignore[operator]
    found = linkerd_binaries.prebuilt_problem(vendor)
    assert found is not None and problem in found


def test_a_source_whose_sum_file_states_another_pin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The binaries are tied to the pinned sources: a SHA256SUMS of other sources (its
    binaries built from them) is not used, even if every file matches it."""
    vendor = _vendor(tmp_path, monkeypatch)
    plane = pinned.LINKERD_DATAPLANE
    other = DataPlaneSource("fix.patch", "0" * 64)
    monkeypatch.setattr(
        pinned,
        "LINKERD_DATAPLANE",
        LinkerdDataPlane(
            plane.release,
            plane.proxy_version,
            tuple(other if s.file == "fix.patch" else s for s in plane.sources),
            plane.binaries,
        ),
    )
    found = linkerd_binaries.prebuilt_problem(vendor)
    assert found is not None and "not the pinned 0000" in found


def test_without_a_vendor_folder_the_data_plane_names_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LINKERD_CONFIG_CACHE", str(tmp_path))
    monkeypatch.delenv(linkerd_binaries.DATAPLANE_ENV, raising=False)
    with pytest.raises(BinaryUnavailableError, match="LINKERD_DATAPLANE_SOURCE is not set"):
        linkerd_binaries.ensure_dataplane(progress=lambda _: None)


def test_the_pins_are_the_vendored_recipes_inputs() -> None:
    """Each source the recipe names is pinned, by the file's name in the vendor folder."""
    plane = pinned.LINKERD_DATAPLANE
    files = {s.file for s in plane.sources}
    assert {
        "linkerd2-proxy-v2.366.0.tar.gz",
        "linkerd-kubert-cb414cc.tar.gz",
        "linkerd-kubert-04f6ac3.tar.gz",
        "linkerd2-proxy-init-v2.4.9.tar.gz",
        "linkerd2-proxy-v2.366.0.patch",
        "linkerd2-edge-26.8.3-policy-controller.patch",
        "RECIPE.txt",
    } == files
    assert all(len(s.sha256) == 64 for s in plane.sources)
    assert plane.release.tag == "edge-26.8.3"


def test_file_capabilities_are_what_setcap_writes() -> None:
    # `setcap cap_net_raw,cap_net_admin+eip FILE; getfattr -n security.capability -e hex FILE`
    # prints 0x0100000200300000000000000000000000000000.
    caps = real_node.file_capabilities(12, 13)
    assert caps.hex() == "0100000200300000000000000000000000000000"
    assert struct.unpack("<I", caps[:4])[0] == 0x02000001


def test_a_layer_carries_modes_parents_and_extended_attributes() -> None:
    caps = {"security.capability": real_node.file_capabilities(12, 13)}
    layer = real_node.layer_tar(
        {
            "usr/lib/linkerd/linkerd2-proxy-init": real_node.LayerFile(b"init", xattrs=caps),
            "controller": real_node.LayerFile(b"ctl", mode=0o700),
        }
    )
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert [n for n in members if members[n].isdir()] == ["usr", "usr/lib", "usr/lib/linkerd"]
        init = members["usr/lib/linkerd/linkerd2-proxy-init"]
        raw = init.pax_headers["SCHILY.xattr.security.capability"]
        assert raw.encode("utf-8", "surrogateescape") == caps["security.capability"]
        assert init.mode == 0o755 and init.uid == 0 and init.mtime == 0
        assert members["controller"].mode == 0o700
    assert layer == real_node.layer_tar(
        {
            "controller": real_node.LayerFile(b"ctl", mode=0o700),
            "usr/lib/linkerd/linkerd2-proxy-init": real_node.LayerFile(b"init", xattrs=caps),
        }
    ), "reproducible"


def test_one_layout_holds_every_image_and_a_shared_base_once(tmp_path: Path) -> None:
    base = tmp_path / "rootfs.tar"
    base.write_bytes(real_node.layer_tar({"bin/sh": real_node.LayerFile(b"sh")}))
    top = real_node.layer_tar({"app": real_node.LayerFile(b"app")})
    archive = tmp_path / "images.oci.tar"
    real_node.write_oci_layout(
        archive,
        [
            real_node.OciImage("localhost/a:1", (base, top), {"Entrypoint": ["/app"]}),
            real_node.OciImage("localhost/b:1", (base,), {"User": "65534"}),
        ],
    )
    with tarfile.open(archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    for name, blob in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    base_digest = hashlib.sha256(base.read_bytes()).hexdigest()
    assert sum(blob == base.read_bytes() for blob in files.values()) == 1
    index = json.loads(files["index.json"])
    names = [m["annotations"]["io.containerd.image.name"] for m in index["manifests"]]
    assert names == ["localhost/a:1", "localhost/b:1"]
    manifests = [json.loads(files[f"blobs/sha256/{m['digest'][7:]}"]) for m in index["manifests"]]
    assert manifests[0]["layers"][0]["digest"] == f"sha256:{base_digest}"
    configs = [json.loads(files[f"blobs/sha256/{m['config']['digest'][7:]}"]) for m in manifests]
    assert configs[0]["config"] == {"Entrypoint": ["/app"]}
    assert configs[1]["rootfs"]["diff_ids"] == [f"sha256:{base_digest}"]


def _services(service: str, namespace: str) -> list[str] | None:
    known = {
        ("kubernetes", "default"): ["10.0.0.1"],
        ("linkerd-dst-headless", "linkerd"): ["10.245.0.7", "10.245.0.9"],
        ("empty-headless", "linkerd"): [],
    }
    return known.get((service, namespace))


def test_cluster_dns_answers_services_and_their_endpoints() -> None:
    reply = cluster_dns.answer(
        cluster_dns.query("linkerd-dst-headless.linkerd.svc.cluster.local."), _services
    )
    assert reply is not None
    assert cluster_dns.addresses(reply) == (cluster_dns.NOERROR, ["10.245.0.7", "10.245.0.9"])
    assert reply[:2] == b"\x01\xd5" and reply[2] & 0x80, "a response to the query's id"
    upper = cluster_dns.answer(cluster_dns.query("KUBERNETES.default.SVC.cluster.local"), _services)
    assert upper is not None and cluster_dns.addresses(upper) == (0, ["10.0.0.1"])


@pytest.mark.parametrize(
    ("name", "qtype", "rcode"),
    [
        ("missing.default.svc.cluster.local", 1, cluster_dns.NXDOMAIN),
        # ndots:5 tries the search domains first: those names do not exist.
        ("kubernetes.default.svc.cluster.local.default.svc.cluster.local", 1, 3),
        ("cluster.local", 1, cluster_dns.NXDOMAIN),
        ("kubernetes.default.svc.cluster.local", 28, cluster_dns.NOERROR),  # AAAA: none
        ("empty-headless.linkerd.svc.cluster.local", 1, cluster_dns.NOERROR),
    ],
)
def test_cluster_dns_says_what_does_not_exist(name: str, qtype: int, rcode: int) -> None:
    reply = cluster_dns.answer(cluster_dns.query(name, qtype), _services)
    assert reply is not None
    assert cluster_dns.addresses(reply) == (rcode, [])


def test_cluster_dns_forwards_other_names_and_fails_when_the_api_fails() -> None:
    assert cluster_dns.answer(cluster_dns.query("www.example.com"), _services) is None

    def down(service: str, namespace: str) -> list[str] | None:
        raise OSError("connection refused")

    reply = cluster_dns.answer(cluster_dns.query("kubernetes.default.svc.cluster.local"), down)
    assert reply is not None and cluster_dns.addresses(reply) == (cluster_dns.SERVFAIL, [])
    with pytest.raises(ValueError):
        cluster_dns.parse_question(b"\x00\x01")


def test_the_host_nameserver_is_the_first_ipv4_one(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text(
        "search example\nnameserver ::1\nnameserver 10.255.255.53\nnameserver 1.1.1.1\n"
    )
    assert cluster_dns.host_nameserver(conf) == "10.255.255.53"
    assert cluster_dns.host_nameserver(tmp_path / "none") is None


def test_linkerd_is_installed_on_the_local_images_never_pulled() -> None:
    values = dict(v.split("=", 1) for v in linkerd_control_plane.install_values())
    assert values["controllerImage"] == "localhost/linkerd/controller"
    assert values["proxy.image.name"] == "localhost/linkerd/proxy"
    assert values["imagePullPolicy"] == "Never"
    assert values["proxy.shutdownGracePeriod"] == "5s"
    assert values["identity.issuer.issuanceLifetime"] == "60s"
    namespace = linkerd_control_plane.meshed_namespace("app")["metadata"]
    assert namespace["annotations"] == {
        "linkerd.io/inject": "enabled",
        "scheduler.alpha.kubernetes.io/node-selector": "linkerd-config.dev/node=real",
    }
    assert linkerd_control_plane.has_proxy(
        {"spec": {"initContainers": [{"name": "linkerd-init"}, {"name": "linkerd-proxy"}]}}
    )
    assert not linkerd_control_plane.has_proxy({"spec": {"containers": [{"name": "app"}]}})


def test_the_identity_issuer_is_signed_by_the_tests_own_anchor() -> None:
    pki = identity_pki()
    anchor = x509.load_pem_x509_certificate(pki.trust_anchors.encode())
    issuer = x509.load_pem_x509_certificate(pki.issuer_certificate.encode())
    issuer.verify_directly_issued_by(anchor)
    assert issuer.subject.rfc4514_string() == "CN=identity.linkerd.cluster.local"
    constraints = issuer.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    key = serialization.load_pem_private_key(pki.issuer_key.encode(), None)
    assert key.public_key().public_numbers() == issuer.public_key().public_numbers()  # type: ignore[union-attr]
    assert identity_pki().trust_anchors != pki.trust_anchors, "a new anchor each call"
    # A rotation's new issuer, under another anchor of the test's.
    other = signing_anchor()
    certificate, _ = identity_issuer(other)
    x509.load_pem_x509_certificate(certificate.encode()).verify_directly_issued_by(
        x509.load_pem_x509_certificate(other.certificate.encode())
    )
