"""TLS helpers shared by the servers and the API client."""

from __future__ import annotations

import importlib
import os
import ssl
import sys
import tempfile
from pathlib import Path

_CA_FILE_ENV = "SSL_CERT_FILE"


def import_aiohttp_without_system_cas() -> None:
    """Import aiohttp without the two client contexts it makes at import time, each loading
    the system CA bundle (about 35 ms and 3 MiB on a Debian image, the largest cost of the
    import): every HTTPS client here brings its own context (the cluster's CA, or the system
    roots then, by ``ssl.create_default_context``), so aiohttp's defaults are never used.
    OpenSSL reads the bundle's path from ``SSL_CERT_FILE`` when a context asks for the
    defaults; it points at nothing while aiohttp is imported, and is put back after. Call it
    before anything imports aiohttp; later calls do nothing."""
    if "aiohttp" in sys.modules:
        return
    before = os.environ.get(_CA_FILE_ENV)
    os.environ[_CA_FILE_ENV] = os.devnull
    try:
        importlib.import_module("aiohttp")
    finally:
        if before is None:
            del os.environ[_CA_FILE_ENV]
        else:
            os.environ[_CA_FILE_ENV] = before


def load_chain_from_memory(context: ssl.SSLContext, pem: bytes) -> None:
    """``context.load_cert_chain`` from PEM bytes (certificate(s) then key): Python's ssl reads
    only files, so through a Linux memfd where there is one (the key never touches a file
    system), else a private temporary folder removed at once."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = memfd_create("tls-pair", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "wb") as out:
                out.write(pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
            return
        except FileNotFoundError:  # no /proc: fall back to a file
            pass
        finally:
            os.close(fd)
    with tempfile.TemporaryDirectory(prefix="tls-") as folder:  # mode 0700
        path = Path(folder) / "tls.pem"
        path.touch(mode=0o600)
        path.write_bytes(pem)
        context.load_cert_chain(path)
