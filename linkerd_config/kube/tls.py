"""TLS helpers shared by the servers and the API client."""

from __future__ import annotations

import asyncio.sslproto
import importlib
import mimetypes
import os
import ssl
import sys
import tempfile
from pathlib import Path

_CA_FILE_ENV = "SSL_CERT_FILE"


def import_aiohttp_lean() -> None:
    """Import aiohttp without what it loads at import for nothing here. The two client
    contexts it makes, each loading the system CA bundle (about 35 ms and 3 MiB on a Debian
    image, the largest cost of the import): every HTTPS client here brings its own context
    (the cluster's CA, or the system roots then, by ``ssl.create_default_context``), so
    aiohttp's defaults are never used. OpenSSL reads the bundle's path from ``SSL_CERT_FILE``
    when a context asks for the defaults; it points at nothing while aiohttp is imported,
    and is put back after. And the system's MIME table (/etc/mime.types, 370 KiB parsed),
    which aiohttp's file responses read when aiohttp.web is imported: this process serves
    no files and guesses no file's type, so the module's own table is enough
    (``mimetypes.knownfiles`` emptied for the process). Call it before anything imports
    aiohttp; later calls do nothing."""
    if "aiohttp" in sys.modules:
        return
    mimetypes.knownfiles = []
    before = os.environ.get(_CA_FILE_ENV)
    os.environ[_CA_FILE_ENV] = os.devnull
    try:
        importlib.import_module("aiohttp")
    finally:
        if before is None:
            del os.environ[_CA_FILE_ENV]
        else:
            os.environ[_CA_FILE_ENV] = before


TLS_READ_BUFFER = 16 * 1024
"""Bytes asyncio decrypts into per TLS connection (its default: 256 KiB each)."""


def small_tls_read_buffers() -> None:
    """Give every TLS connection of this process a 16 KiB read buffer instead of asyncio's
    256 KiB (``SSLProtocol.max_size``, allocated whole for each connection). The controller
    holds a dozen long-lived watch connections (HTTP/1.1: one per watch) and its servers up
    to 128: at 256 KiB each that is 3 MiB at rest and 32 MiB under a flood. A TLS record is
    at most 16 KiB, so a read takes one. Against 64 KiB, at 10,000 pods (3 interleaved
    rounds): peak 57.6 -> 57.1 MiB, ready 0.57 -> 0.54 s; the LIST pages arrive gzipped,
    so the reads are few either way."""
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


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
