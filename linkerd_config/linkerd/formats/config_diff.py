"""A readable difference between two versions of a ConfigMap key: by parsed path, not by text.

Linkerd's keys are JSON (``global``, ``proxy``), YAML (``values``) or PEM (the trust roots),
and a changed JSON string is one unreadable line. This parses both sides and lists the leaves
that differ (``proxy.image.version: edge-26.8.3 → edge-26.8.4``); a certificate bundle, wherever
it sits, becomes the certificates it holds, so a new trust anchor reads as one. Pure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from linkerd_config.kube import x509_reader
from linkerd_config.kube.resource import rfc3339
from linkerd_config.linkerd.formats import bounded, go_yaml

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()
"""A side where the path does not exist."""


@dataclass(frozen=True)
class Change:
    path: str
    """Dotted path into the parsed key (``proxy.image.version``); empty for the whole key."""
    before: Any
    after: Any

    @property
    def op(self) -> str:
        if self.before is ABSENT:
            return ADDED
        return REMOVED if self.after is ABSENT else CHANGED

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"path": self.path, "op": self.op}
        if self.before is not ABSENT:
            found["before"] = self.before
        if self.after is not ABSENT:
            found["after"] = self.after
        return found


def readable(text: str | None) -> Any:
    """What a key's text says: JSON or a YAML mapping parsed, certificates described, or the
    text itself; ABSENT for a key that is not there. Read by the same bounded readers as the
    controller's (``formats.bounded``; YAML by Go's rules, ``formats.go_yaml``, as Linkerd
    reads ``values``, so a value written back in another form Go reads alike is no change):
    a text they refuse (an alias bomb, a key twice) is compared as text, never expanded."""
    if text is None:
        return ABSENT
    parsed: Any = text
    try:
        parsed = bounded.json_value(text)
    except bounded.Unreadable:
        try:
            loaded = go_yaml.value(text)
        except bounded.Unreadable:
            loaded = None
        if isinstance(loaded, dict):
            parsed = loaded
    return _described(parsed)


def _described(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _described(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_described(v) for v in value]
    if isinstance(value, str) and _PEM_BEGIN in value:
        return certificates(value)
    return value


def certificates(bundle: str) -> list[str]:
    """Each certificate of a PEM bundle as ``subject (expires ..., sha256 ...)``; a bundle
    that does not parse reads as one line saying so, with its text's digest."""
    try:
        found = x509_reader.read_pem_bundle(bundle)
    except x509_reader.CertificateError:
        digest = hashlib.sha256(bundle.encode()).hexdigest()[:16]
        return [f"unreadable certificate bundle (sha256 {digest})"]
    return [
        f"{cert.subject} (expires {rfc3339(cert.not_after)}, sha256 {cert.fingerprint[:16]})"
        for cert in found
    ]


def diff(before: Any, after: Any, path: str = "") -> list[Change]:
    """Every leaf that differs, in path order. Mappings are walked; a list or a scalar is one
    leaf (a list of ports reads better whole than element by element). A mapping added or
    removed whole is walked too, so each of its leaves is listed."""
    if before is ABSENT and isinstance(after, dict):
        before = {}
    if after is ABSENT and isinstance(before, dict):
        after = {}
    if isinstance(before, dict) and isinstance(after, dict):
        found: list[Change] = []
        for key in sorted(set(before) | set(after)):
            child = f"{path}.{key}" if path else key
            found.extend(diff(before.get(key, ABSENT), after.get(key, ABSENT), child))
        return found
    return [] if before == after else [Change(path, before, after)]


def key_diff(before: str | None, after: str | None) -> list[Change]:
    """How a ConfigMap key changes, by path; a key rewritten to the same content (another
    order, other spacing) has no path that differs, and diffs as one whole-key change."""
    if before == after:
        return []
    found = diff(readable(before), readable(after))
    if found or before is None or after is None:
        return found
    return [Change("", f"{len(before)} bytes", f"{len(after)} bytes, the same content")]
