"""The LinkerdConfig conversion webhook for the tests' API servers: the product's own
``AdmissionServer`` with the product's converter, on loopback, one per test process.

It runs on an event loop of its own in a daemon thread, so that it outlives any test's loop
and serves every control plane the process starts (each CRD this process installs points
at it). Started on first use.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from linkerd_config.kube.admission import AdmissionServer, ReloadingCertificate
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.admission.webhooks import convert_object
from linkerd_config.linkerd.spec.crd import CONVERT_PATH, conversion_webhook


@dataclass(frozen=True)
class ConversionServer:
    url: str
    ca_pem: bytes

    def conversion(self) -> Json:
        """The CRD's ``spec.conversion`` pointing at this server."""
        return conversion_webhook(url=self.url, ca_pem=self.ca_pem)


@functools.cache
def conversion_server() -> ConversionServer:
    """This process's server (started on the first call; functools.cache holds a lock)."""
    return _start()


def _start() -> ConversionServer:
    cert_dir = Path(tempfile.mkdtemp(prefix="linkerd-config-conversion-"))
    ca_pem = write_serving_pair(cert_dir, ["localhost"], ["127.0.0.1"])
    ready = threading.Event()
    port: list[int] = []

    def run() -> None:
        async def serve() -> None:
            server = AdmissionServer(
                "127.0.0.1", 0, ReloadingCertificate(cert_dir / "tls.crt", cert_dir / "tls.key")
            )
            server.add_conversion(CONVERT_PATH, convert_object)
            task = asyncio.create_task(server.run(), name="test-conversion-webhook")
            await asyncio.wait_for(server.started.wait(), 30)
            assert server.bound_port is not None
            port.append(server.bound_port)
            ready.set()
            await task

        asyncio.run(serve())

    threading.Thread(target=run, name="conversion-webhook", daemon=True).start()
    if not ready.wait(60):
        raise RuntimeError("the tests' conversion webhook did not start in 60 s")
    return ConversionServer(f"https://127.0.0.1:{port[0]}", ca_pem)
