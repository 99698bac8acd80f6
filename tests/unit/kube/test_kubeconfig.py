"""Reading a kubeconfig or the pod's ServiceAccount without the client library, and handing
the users only it can authenticate to it."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from linkerd_config.kube import kubeconfig
from linkerd_config.kube.certs import TinyCA
from linkerd_config.kube.kubeconfig import AccessError, from_kubeconfig, in_cluster, load_access


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster or {"server": "https://k:6443/"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture
def ca() -> TinyCA:
    return TinyCA("kubeconfig-test-ca")


async def test_client_certificate_data_and_ca(tmp_path: Path, ca: TinyCA) -> None:
    pair = ca.client("admin", ["system:masters"])
    path = write(
        tmp_path / "config",
        {"client-certificate-data": b64(pair.cert_pem), "client-key-data": b64(pair.key_pem)},
        {"server": "https://k:6443/", "certificate-authority-data": b64(ca.cert_pem)},
    )
    access = from_kubeconfig(path)
    assert access is not None
    assert access.server == "https://k:6443"
    assert isinstance(access.ssl_context, ssl.SSLContext)
    assert access.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in access.ssl_context.get_ca_certs()] == [
        ((("commonName", "kubeconfig-test-ca"),),)
    ]
    assert await access.bearer() is None
    assert access.source == f"kubeconfig:{path}"


async def test_files_relative_to_the_kubeconfig_and_a_token(tmp_path: Path, ca: TinyCA) -> None:
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    path = write(
        tmp_path / "config",
        {"token": "abc"},
        {"server": "https://k", "certificate-authority": "ca.crt"},
    )
    access = from_kubeconfig(path)
    assert access is not None and await access.bearer() == "Bearer abc"


async def test_token_file_is_read_again_after_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(kubeconfig, "monotonic", lambda: now[0])
    (tmp_path / "token").write_text("first\n")
    access = from_kubeconfig(write(tmp_path / "config", {"tokenFile": "token"}))
    assert access is not None and await access.bearer() == "Bearer first"
    (tmp_path / "token").write_text("second\n")
    now[0] += kubeconfig.TOKEN_FILE_REREAD - 1
    assert await access.bearer() == "Bearer first"
    now[0] += 1
    assert await access.bearer() == "Bearer second"


def test_insecure_skip_tls_verify(tmp_path: Path) -> None:
    access = from_kubeconfig(
        write(tmp_path / "c", {}, {"server": "https://k", "insecure-skip-tls-verify": True})
    )
    assert access is not None and isinstance(access.ssl_context, ssl.SSLContext)
    assert access.ssl_context.verify_mode == ssl.CERT_NONE
    assert access.ssl_context.check_hostname is False


@pytest.mark.parametrize(
    "user",
    [
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}},
        {"auth-provider": {"name": "oidc"}},
        {"username": "a", "password": "b"},
    ],
)
def test_users_only_the_library_can_authenticate_are_handed_to_it(
    tmp_path: Path, user: dict[str, Any]
) -> None:
    assert from_kubeconfig(write(tmp_path / "config", user)) is None


async def test_an_exec_plugin_user_works_through_the_library(tmp_path: Path) -> None:
    """The library runs the plugin: its ExecCredential's token becomes the bearer."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json\nprint(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'from-plugin'}}))\n"
    )
    path = write(
        tmp_path / "config",
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [str(plugin)],
                "interactiveMode": "Never",
            }
        },
        {"server": "https://k:6443", "insecure-skip-tls-verify": True},
    )
    access = await load_access(str(path))
    assert access.server == "https://k:6443"
    assert await access.bearer() == "Bearer from-plugin"


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"clusters": [], "contexts": [], "users": []}, "has no current-context"),
        ({"current-context": "nope", "contexts": []}, "names context 'nope'"),
    ],
)
async def test_unusable_kubeconfigs_say_why(
    tmp_path: Path, config: dict[str, Any], words: str
) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(AccessError, match=words):
        await load_access(str(path))


async def test_a_named_kubeconfig_must_exist(tmp_path: Path) -> None:
    with pytest.raises(AccessError, match="does not exist"):
        await load_access(str(tmp_path / "missing"))


async def test_in_cluster_reads_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: TinyCA
) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    access = in_cluster("~/.kube/config")
    assert access.server == "https://[fd00::1]:443"
    assert await access.bearer() == "Bearer sa-token"
    assert access.source == "in-cluster"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(AccessError, match="not running in a cluster"):
        in_cluster("~/.kube/config")


def test_the_running_controller_does_not_import_the_client_library() -> None:
    """The point of reading kubeconfigs here: ~40 MiB and 0.4 s less at every start."""
    code = "import sys, linkerd_config.app; print('kubernetes_asyncio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "False"


# -- --context and a KUBECONFIG list (kubectl's conventions, for the kubectl plugin) ----------


def config_file(path: Path, clusters: dict[str, Any], contexts: dict[str, str], **top: Any) -> Path:
    """A kubeconfig with ``clusters`` (name: cluster) and ``contexts`` (name: cluster name),
    each context with the user ``u`` (a token naming the file)."""
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
                "users": [{"name": "u", "user": {"token": path.name}}],
                "contexts": [
                    {"name": n, "context": {"cluster": c, "user": "u"}} for n, c in contexts.items()
                ],
                **top,
            }
        )
    )
    return path


async def test_a_context_other_than_the_current_one(tmp_path: Path) -> None:
    path = config_file(
        tmp_path / "config",
        {"a": {"server": "http://a"}, "b": {"server": "http://b"}},
        {"x": "a", "y": "b"},
        **{"current-context": "x"},
    )
    assert (await load_access(str(path))).server == "http://a"
    assert (await load_access(str(path), "y")).server == "http://b"
    with pytest.raises(AccessError, match="names context 'nope' but does not define it"):
        await load_access(str(path), "nope")


async def test_a_kubeconfig_list_is_merged_as_kubectl_merges_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: TinyCA
) -> None:
    """The first file to define a name or the current-context wins; a relative file is
    relative to the file that names it; files that do not exist are skipped."""
    (tmp_path / "second").mkdir()
    (tmp_path / "second" / "ca.crt").write_bytes(ca.cert_pem)
    first = config_file(tmp_path / "first", {"a": {"server": "http://a"}}, {"x": "a"})
    second = config_file(
        tmp_path / "second" / "config",
        {
            "a": {"server": "http://not-this-one"},
            "b": {"server": "https://b", "certificate-authority": "ca.crt"},
        },
        {"x": "b", "y": "b"},
        **{"current-context": "y"},
    )
    listed = f"{tmp_path / 'missing'}:{first}:{second}"
    monkeypatch.setenv("KUBECONFIG", listed)
    access = await load_access()
    assert access.server == "https://b"  # current-context y, from the second file
    assert await access.bearer() == "Bearer first"  # user u: the first file's
    assert isinstance(access.ssl_context, ssl.SSLContext)
    assert len(access.ssl_context.get_ca_certs()) == 1  # second/ca.crt, found beside it
    assert (await load_access(None, "x")).server == "http://a"  # x: the first file's
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    with pytest.raises(AccessError, match="none of its files exists"):
        await load_access()
