"""TLS helpers shared by the servers and the API client."""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path


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
