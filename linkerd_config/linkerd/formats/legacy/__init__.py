"""Linkerd's legacy config format (stable-2.6.0 to 2.8.x, edge-19.12.1 to edge-20.10.1).

``config_pb2`` is generated from ``proto/linkerd/config/config.proto`` by
``proto/generate.py``; do not edit it by hand.
"""

from linkerd_config.linkerd.formats.legacy.format import (
    FIRST_SUPPORTED,
    FIRST_UNSUPPORTED,
    MANAGED_KEYS,
    PORT_RANGES_SINCE,
    LegacyFormat,
    field_releases,
)

__all__ = [
    "FIRST_SUPPORTED",
    "FIRST_UNSUPPORTED",
    "MANAGED_KEYS",
    "PORT_RANGES_SINCE",
    "LegacyFormat",
    "field_releases",
]
