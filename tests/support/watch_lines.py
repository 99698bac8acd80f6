"""Watch-protocol lines and objects, as the API server sends them, for the watch and informer
unit tests."""

from __future__ import annotations

import orjson

from linkerd_config.kube.resource import Json


def line(kind: str, obj: Json) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def cm(name: str, rv: str, uid: str | None = None, **data: str) -> Json:
    meta: Json = {"name": name, "namespace": "ns", "resourceVersion": rv}
    meta["uid"] = uid or f"uid-{name}"
    return {"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta, "data": data}


def status(code: int, reason: str = "", message: str = "") -> Json:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "code": code,
        "reason": reason,
        "message": message,
    }
