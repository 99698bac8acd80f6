"""What ``run`` sets for its whole process before it starts (``kube.tls``).

``import_aiohttp_lean``: aiohttp imported without loading the system CA bundle into the
two default contexts it makes at import (which nothing here uses), the environment left as it
was, and a context asked for the system roots afterwards still gets them; nor the system's
MIME table when aiohttp.web is imported. Each case runs in a fresh interpreter: aiohttp is
imported once per process.

``small_tls_read_buffers``: TLS connections read into 16 KiB, not asyncio's 256 KiB."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.tls import small_tls_read_buffers

PROBE = """
import json, os, ssl, sys
from linkerd_config.kube.tls import import_aiohttp_lean
import_aiohttp_lean()
import_aiohttp_lean()  # a second call does nothing
import aiohttp.connector as connector
import aiohttp.web, mimetypes
print(json.dumps({
    "mime_types": len(mimetypes.types_map),
    "mime_default": len(mimetypes._types_map_default),
    "json_type": mimetypes.guess_type("x.json")[0],
    "aiohttp_verified": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
    "aiohttp_unverified": connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509_ca"],
    "default_after": ssl.create_default_context().cert_store_stats()["x509_ca"],
    "env": os.environ.get("SSL_CERT_FILE"),
}))
"""


def probe(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def system_bundle_size() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import ssl; print(ssl.create_default_context()"
         ".cert_store_stats()['x509_ca'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(done.stdout)


@pytest.mark.parametrize("bundle_env", ["unset", "set"])
def test_aiohttp_defaults_hold_no_cas_and_the_system_roots_stay_usable(bundle_env: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    expected_env = None
    if bundle_env == "set":
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        if not os.path.isfile(bundle):
            pytest.skip(f"no {bundle} on this machine")
        env["SSL_CERT_FILE"] = expected_env = bundle
    roots = system_bundle_size()
    answer = probe(env)
    assert answer["aiohttp_verified"] == 0
    assert answer["aiohttp_unverified"] == 0
    assert answer["env"] == expected_env
    assert answer["default_after"] == roots
    # The module's own table, no system file read; what it knows still answers.
    assert answer["mime_types"] == answer["mime_default"]
    assert answer["json_type"] == "application/json"


async def test_tls_connections_read_into_16_kib_and_lose_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``small_tls_read_buffers``: each TLS connection's buffer is 16 KiB, one TLS record
    (asyncio allocates 256 KiB each), and a payload many times that arrives whole."""
    monkeypatch.setattr(
        asyncio.sslproto.SSLProtocol, "max_size", asyncio.sslproto.SSLProtocol.max_size
    )
    small_tls_read_buffers()
    ca_pem = write_serving_pair(tmp_path, ["localhost"], ["127.0.0.1"])
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cadata=ca_pem.decode())
    payload = os.urandom(3 * 1024 * 1024)

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
        )
        protocol = writer.transport._ssl_protocol  # type: ignore[attr-defined]
        assert len(protocol._ssl_buffer) == 16 * 1024
        received = await asyncio.wait_for(reader.read(), 30)
        writer.close()
    assert received == payload
