"""Where the API server is and how to authenticate: a kubeconfig's current context, or the
pod's ServiceAccount, resolved once at start-up.

What nearly every kubeconfig and every pod uses is read here directly: client certificates,
a token or a token file, the in-cluster ServiceAccount token (re-read as the kubelet rotates
it). kubernetes_asyncio's loader imports every API model of the library (about 40 MiB and
0.4 s of a start-up that is otherwise 55 MiB), so it is imported only for a kubeconfig
whose user runs an ``exec`` credential plugin, a legacy ``auth-provider`` or basic auth,
which it knows how to run and refresh.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from linkerd_config.kube.tls import load_chain_from_memory

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_REREAD = 60.0
"""Seconds a token file is trusted before it is read again (client-go re-reads it as often):
bound ServiceAccount tokens are rotated by the kubelet long before they expire."""
NEEDS_LIBRARY = ("exec", "auth-provider", "username", "password")
monotonic = time.monotonic  # a test's clock replaces it


@dataclass(frozen=True)
class ClusterAccess:
    """Where the API server is and how to authenticate, resolved once at start-up."""

    server: str
    ssl_context: ssl.SSLContext | bool
    bearer: Callable[[], Awaitable[str | None]]
    """The Authorization header's value ("Bearer ..."), or None."""
    source: str  # "kubeconfig:<path>" or "in-cluster", for logs


class AccessError(RuntimeError):
    """Where the API server is, or how to reach it, cannot be known; says what to do."""


async def load_access(kubeconfig: str | None = None, context: str | None = None) -> ClusterAccess:
    """Kubeconfig if one is named or present (its ``context``, else its current one), else
    the pod's service account."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if os.pathsep in path:  # a list, as kubectl takes KUBECONFIG: merged as kubectl merges it
        return await _merged_access(path, context)
    exists: bool = await asyncio.to_thread(Path(path).is_file)
    if kubeconfig and not exists:
        raise AccessError(f"kubeconfig {path} does not exist (check --kubeconfig or KUBECONFIG)")
    if not exists:
        if context:
            raise AccessError(f"--context {context}: no kubeconfig ({path} does not exist)")
        return await asyncio.to_thread(in_cluster, path)
    try:
        access = await asyncio.to_thread(from_kubeconfig, Path(path), context)
        if access is None:
            access = await _with_library(path, context)
    except AccessError:
        raise
    except Exception as exc:  # a parser's, a file's or the library's: all mean unusable
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise AccessError(f"kubeconfig {path} is not usable: {reason}") from exc
    return access


async def _merged_access(paths: str, context: str | None) -> ClusterAccess:
    """A KUBECONFIG list: the files that exist, merged as kubectl merges them (the first to
    define a name, or the current-context, wins; each file's relative paths its own)."""
    files = [Path(p) for p in paths.split(os.pathsep) if p]
    present = [f for f in files if await asyncio.to_thread(f.is_file)]
    if not present:
        raise AccessError(f"KUBECONFIG {paths}: none of its files exists")
    try:
        merged = await asyncio.to_thread(merge_kubeconfigs, present)
        access = from_config(merged, Path(paths), context)
        if access is None:
            access = await _with_library(paths, context, merged)
    except AccessError:
        raise
    except Exception as exc:  # as for one file
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise AccessError(f"KUBECONFIG {paths} is not usable: {reason}") from exc
    return access


_FILE_KEYS: Final = ("certificate-authority", "client-certificate", "client-key", "tokenFile")


MAX_KUBECONFIG_BYTES: Final = 16 * 1024 * 1024
"""A kubeconfig (or a file it names) larger is refused unread: real ones are kilobytes (a few
megabytes with many clusters and embedded certificates); parsing hundreds of megabytes took a
minute and gigabytes of memory (issue 39, finding 6)."""


_READ_CHUNK: Final = 64 * 1024


def _read(path: Path, what: str = "kubeconfig") -> bytes:
    """``path``'s bytes, refused when over ``MAX_KUBECONFIG_BYTES`` (read no further)."""
    data = bytearray()
    with path.open("rb") as handle:
        # In chunks: ``read(n)`` allocates n bytes before it reads one.
        while len(data) <= MAX_KUBECONFIG_BYTES and (chunk := handle.read(_READ_CHUNK)):
            data += chunk
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise AccessError(
            f"{what} {path} is larger than {MAX_KUBECONFIG_BYTES // (1024 * 1024)} MiB: not read"
        )
    return bytes(data)


def _parsed(path: Path) -> Any:
    """``path`` parsed (a YAML error is the caller's to say, in one line)."""
    return yaml.safe_load(_read(path)) or {}


def merge_kubeconfigs(files: list[Path]) -> dict[str, Any]:
    """kubectl's merge of several kubeconfig files: for clusters, users and contexts the
    first file to define a name wins, as does the first current-context; a relative file
    reference is made absolute against the file it came from."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {section: set() for section in merged}
    for path in files:
        config = _parsed(path)
        if not isinstance(config, dict):
            raise AccessError(f"kubeconfig {path} is not a mapping")
        if not merged.get("current-context") and config.get("current-context"):
            merged["current-context"] = config["current-context"]
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in config.get(section) or []:
                name = entry.get("name") if isinstance(entry, dict) else None
                if not isinstance(name, str) or name in seen[section]:
                    continue
                seen[section].add(name)
                body = dict(entry.get(key) or {})
                for file_key in _FILE_KEYS:
                    if isinstance(body.get(file_key), str) and body[file_key]:
                        body[file_key] = str(path.parent / body[file_key])
                merged[section].append({"name": name, key: body})
    return merged


def from_kubeconfig(path: Path, context: str | None = None) -> ClusterAccess | None:
    """``context`` of ``path``, else its current context; None when its user needs the
    client library."""
    config = _parsed(path)
    if not isinstance(config, dict):
        raise AccessError(f"kubeconfig {path} is not a mapping")
    return from_config(config, path, context)


def from_config(
    config: dict[str, Any], path: Path, context: str | None = None
) -> ClusterAccess | None:
    """``context`` of a parsed kubeconfig (read from ``path``: relative files are relative
    to it), else its current context; None when its user needs the client library."""
    name = context or config.get("current-context")
    if not name:
        raise AccessError(f"kubeconfig {path} has no current-context")
    chosen = _named(config, "contexts", name, "context")
    cluster = _named(config, "clusters", chosen.get("cluster"), "cluster")
    user = _named(config, "users", chosen.get("user"), "user") if chosen.get("user") else {}
    if any(key in user for key in NEEDS_LIBRARY):
        return None
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise AccessError(f"kubeconfig {path}: cluster {chosen.get('cluster')!r} has no server")
    base = path.parent
    ctx: ssl.SSLContext | bool = False
    if server.startswith("https"):
        ca = _bytes(cluster, "certificate-authority", base)
        ctx = ssl.create_default_context(cadata=ca.decode() if ca else None)
        if cluster.get("insecure-skip-tls-verify"):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        cert = _bytes(user, "client-certificate", base)
        key = _bytes(user, "client-key", base)
        if cert and key:
            load_chain_from_memory(ctx, cert.rstrip(b"\n") + b"\n" + key)
    if user.get("token"):
        bearer = _fixed(f"Bearer {user['token']}")
    elif user.get("tokenFile"):
        bearer = _token_file(base / str(user["tokenFile"]))
    else:
        bearer = _fixed(None)
    return ClusterAccess(server, ctx, bearer, f"kubeconfig:{path}")


def in_cluster(tried: str) -> ClusterAccess:
    """The pod's ServiceAccount: the API server's Service from the environment, its CA and
    the token the kubelet projects (and rotates) into the pod."""
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    token = SERVICE_ACCOUNT_DIR / "token"
    if not (host and port and token.is_file()):
        raise AccessError(
            f"no kubeconfig at {tried} and not running in a cluster; set --kubeconfig or KUBECONFIG"
        )
    ctx = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    host = f"[{host}]" if ":" in host else host
    return ClusterAccess(f"https://{host}:{port}", ctx, _token_file(token), "in-cluster")


def _named(config: dict[str, Any], section: str, name: object, key: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            found: dict[str, Any] = entry.get(key) or {}
            return found
    raise AccessError(f"the kubeconfig names {section[:-1]} {name!r} but does not define it")


def _bytes(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    """``<key>-data`` (base64) or the file ``<key>`` (relative to the kubeconfig)."""
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return _read(base / str(entry[key]), f"the kubeconfig's {key}")
    return None


def _fixed(header: str | None) -> Callable[[], Awaitable[str | None]]:
    """The Authorization header's value, always the same."""

    async def bearer() -> str | None:
        return header

    return bearer


def _token_file(path: Path) -> Callable[[], Awaitable[str | None]]:
    cached: list[Any] = [None, -TOKEN_FILE_REREAD]  # token, monotonic time read

    async def bearer() -> str | None:
        if monotonic() - cached[1] >= TOKEN_FILE_REREAD:
            text = await asyncio.to_thread(path.read_text)
            cached[:] = [f"Bearer {text.strip()}", monotonic()]
        token: str | None = cached[0]
        return token

    return bearer


async def _with_library(
    path: str, context: str | None = None, merged: dict[str, Any] | None = None
) -> ClusterAccess:
    """kubernetes_asyncio's loader, for the users it alone can authenticate (exec plugins,
    auth providers, basic auth), with its refresh of expiring credentials."""
    from kubernetes_asyncio.client import Configuration  # noqa: PLC0415  (40 MiB; only here)
    from kubernetes_asyncio.config import (  # noqa: PLC0415
        load_kube_config,
        load_kube_config_from_dict,
    )

    cfg = Configuration()
    if merged is not None:
        await load_kube_config_from_dict(merged, context=context, client_configuration=cfg)
    else:
        await load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    host: str = cfg.host or ""
    ctx: ssl.SSLContext | bool = False
    if host.startswith("https"):
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)

    async def bearer() -> str | None:
        token: str | None = await cfg.get_api_key_with_prefix("BearerToken")
        return token

    return ClusterAccess(host.rstrip("/"), ctx, bearer, f"kubeconfig:{path}")
