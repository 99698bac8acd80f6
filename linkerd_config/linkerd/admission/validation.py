"""Whether a LinkerdConfig may be stored: every problem at once, each naming its field.

The validating webhook is a thin wrapper around ``validate``; reconcile never sees an object
this refuses (unless it was stored while the webhook was down, when status reports the same
problems through the format). Pure functions: no I/O, so the rules are tested exhaustively
without a cluster.

The CRD schema already checks types and simple patterns; this adds what OpenAPI and CEL
cannot: certificates, Go durations, Kubernetes quantities, Rust log filters, the ignore-port
grammar, one owner per ConfigMap, and what the target Linkerd version can express. It also
never trusts the schema: any JSON at all comes back as errors, never as an exception.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import orjson

from linkerd_config.kube import x509_reader
from linkerd_config.kube.memo import json_digest
from linkerd_config.kube.resource import Json, rfc3339
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.formats import FieldError, FormatError, HelmValuesFormat, guess
from linkerd_config.linkerd.formats.field_grammar import character_problem, quantity_value
from linkerd_config.linkerd.formats.field_table import HUB_SECTIONS, spec_leaves
from linkerd_config.linkerd.spec.canary_section import problems as canary_problems
from linkerd_config.linkerd.spec.conversion import (
    OMITTED_ANNOTATION_FIELD,
    V1ALPHA1,
    V1ALPHA2,
    VALUES_ANNOTATION,
    VALUES_ANNOTATION_FIELD,
    TooDeepError,
    omitted_values,
    served_field,
    served_text,
    to_hub,
    version_of,
)
from linkerd_config.linkerd.spec.crd import (
    ROLLOUT_DURATION,
    owner_among,
    spec_schema,
    target_of,
)

__all__ = [
    "TRUST_ANCHOR",
    "FieldError",
    "Judgement",
    "Judgements",
    "defaultable",
    "judge",
    "render_errors",
    "validate",
    "warnings_for",
]


TRUST_ANCHOR: Final = "spec.global.identityContext.trustAnchorsPEM"
# Rendering needs some anchor; reconcile substitutes the cluster's, so any string will do.
_PLACEHOLDER_ANCHOR: Final = "(the trust anchor already in the cluster)"
_EXPIRY_WARNING: Final = datetime.timedelta(days=30)
# The schema's own bounds, enforced again here so that no input makes validation slow or its
# answer huge: the webhook runs on the event loop and may see objects the schema never did.
_MAX_DEPTH: Final = 32
_MAX_VALUES: Final = 10_000  # a complete LinkerdConfig spec holds about 50
_MAX_STRING_CHARS: Final = 65536  # the longest field, the PEM bundle, is capped there
_MAX_PEM_CHARS: Final = 65536
_MAX_REPORTED: Final = 50
_MAX_MESSAGE_CHARS: Final = 300

_PORT_FIELDS: Final = ("adminPort", "controlPort", "inboundPort", "outboundPort")
_IMAGE_TAG: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

# Every string field is checked against the CRD schema's own bounds (maxLength, enum) and
# for control and format characters (Cc, Cf, U+2028/U+2029) and lone surrogates, which no
# Linkerd setting holds. A multi-line field (the PEM bundle) keeps tab, line feed and
# carriage return.
_SPEC_SCHEMA: Final = spec_schema(V1ALPHA1)  # the hub's shape
_MULTILINE: Final = frozenset({TRUST_ANCHOR})
_MAX_CERTIFICATES: Final = 100
_SUPPORTED_CURVES: Final = ("secp256r1", "secp384r1")
"""P-256 and P-384, by cryptography's curve names."""
_MIN_RSA_BITS: Final = 2048


def render_errors(errors: Iterable[FieldError], limit: int = _MAX_REPORTED) -> str:
    """``field: message; field: message``, the form admission answers and conditions use.

    At most ``limit`` entries, then how many more: a message stays readable and bounded.
    """
    items = list(errors)
    text = "; ".join(str(e) for e in items[:limit])
    if len(items) > limit:
        text += f"; and {len(items) - limit} more"
    return text


def defaultable(spec: Any) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``defaulted(spec)`` is safe to call: an object whose ``global`` and ``proxy``
    are objects or absent, no larger or deeper than any LinkerdConfig can be. The mutating
    webhook runs before the schema is checked, so it must ask."""
    return (
        isinstance(spec, Mapping)
        and all(spec.get(key) is None or isinstance(spec.get(key), Mapping) for key in HUB_SECTIONS)
        and not _survey(spec).too_big
    )


def validate(
    obj: Json,
    old: Json | None = None,
    others: Iterable[Json] = (),
    *,
    now: datetime.datetime | None = None,
    stored: bool = False,
) -> list[FieldError]:
    """Every reason ``obj`` must not be stored; empty when it may (``judge``'s errors)."""
    return list(judge(obj, old, others, now=now, stored=stored).errors)


@dataclass(frozen=True, slots=True)
class Judgement:
    """``validate``'s answer, and how long it stands."""

    errors: tuple[FieldError, ...]
    until: datetime.datetime | None = None
    """The first moment the same object may be judged otherwise: the next validity boundary
    (notBefore, notAfter) of a trust anchor it holds. None: never (no anchor was read)."""


def judge(
    obj: Json,
    old: Json | None = None,
    others: Iterable[Json] = (),
    *,
    now: datetime.datetime | None = None,
    stored: bool = False,
) -> Judgement:
    """Every reason ``obj`` must not be stored; empty when it may.

    ``stored``: ``obj`` is already stored (reconcile, ``status``), not a write asked for
    (admission, ``plan``): what only matters at the door is not held against it -- v1alpha1's
    values annotation on a v1alpha2 object, which nothing reads, stops no reconcile.

    ``old`` is the stored object on update (None on create); ``others`` the LinkerdConfigs
    already in the cluster (``obj`` itself, by name, is ignored among them). Two updates
    pass without a look at the spec: one on an object being deleted, and one that leaves the
    defaulted spec as it was -- refusing those would block label edits and finalizer removal
    of an object whose trust anchor has since expired.
    """
    if not isinstance(obj, Mapping):
        return Judgement((FieldError("object", "must be a JSON object"),))
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    if old is not None and metadata.get("deletionTimestamp"):
        return Judgement(())
    spec = obj.get("spec")
    if spec is None:
        return Judgement((FieldError("spec", "is required"),))
    if not isinstance(spec, Mapping):
        return Judgement((FieldError("spec", "must be an object"),))
    survey = _survey(spec)
    if survey.too_deep:
        return Judgement((FieldError("spec", f"is nested more than {_MAX_DEPTH} levels deep"),))
    if survey.too_many:
        return Judgement((FieldError("spec", f"holds more than {_MAX_VALUES} values"),))
    if survey.long_strings:
        message = f"is longer than {_MAX_STRING_CHARS} characters"
        return Judgement(tuple(FieldError(path, message) for path in survey.long_strings))
    # Bounded (the survey above): now read as the hub, and answer in the object's names.
    version = version_of(obj)
    # A v1alpha1 object's spec.values (the hub's own form has one) come from its annotation.
    annotated = version == V1ALPHA1 and "values" not in spec
    if version == V1ALPHA2 and not stored and _stray_annotation(metadata, old):
        return Judgement((FieldError(VALUES_ANNOTATION_FIELD, _STRAY_ANNOTATION),))
    omitted = omitted_values(obj) if annotated else None
    if omitted is not None:
        return Judgement((FieldError(OMITTED_ANNOTATION_FIELD, omitted),))
    malformed = _malformed_annotation(metadata) if annotated else None
    if malformed is not None:
        return Judgement((FieldError(VALUES_ANNOTATION_FIELD, malformed),))
    try:
        obj = to_hub(obj)
    except TooDeepError:  # the spec is within the survey's bounds: the annotation is not
        return Judgement((FieldError(VALUES_ANNOTATION_FIELD, "holds too much (size or depth)"),))
    spec = obj["spec"]
    if _survey(spec).too_big:  # v1alpha1's annotation brought more than the spec held
        return Judgement((FieldError(VALUES_ANNOTATION_FIELD, "holds too much (size or depth)"),))
    if isinstance(old, Mapping) and not _survey(old.get("spec")).too_big:
        old = to_hub(old)
    old_spec = old.get("spec") if isinstance(old, Mapping) else None
    if old is not None and _unchanged(old_spec, spec):
        return Judgement(())

    checker = _Checker(now or datetime.datetime.now(datetime.UTC))
    checker.check(spec)
    if defaultable(spec):
        full = defaulted(dict(spec))
        checker.ports(checker.section(full, "proxy", "spec"))
        if old is not None and defaultable(old_spec):
            checker.immutable(defaulted(dict(old_spec)), full)
        checker.ownership(obj, metadata, full, old is None, others)
        checker.format(spec, full)
    errors = tuple(
        FieldError(
            served_field(e.field, version, annotated=annotated),
            served_text(e.message, version, annotated=annotated),
        )
        for e in checker.result()
    )
    return Judgement(errors, checker.stands_until())


class Judgements:
    """``judge``'s verdicts on the objects reconcile sees, remembered one per name: every
    reconcile of a LinkerdConfig validates it again (its webhook may be off or bypassed), and
    most reconciles see the same object, woken by a ConfigMap or a pod. The same object --
    what ``judge`` reads of it: apiVersion, uid, name, creationTimestamp, annotations and
    spec -- is judged once, and again only after its verdict's ``until``."""

    def __init__(
        self,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._clock = clock
        self._kept: dict[str, tuple[bytes, Judgement]] = {}

    def validate(self, obj: Json) -> list[FieldError]:
        """``validate(obj)``, from memory when ``obj`` was judged as it is and still stands."""
        now = self._clock()
        name, key = _verdict_key(obj)
        kept = self._kept.get(name) if key is not None else None
        if kept is not None and kept[0] == key and (kept[1].until is None or now < kept[1].until):
            return list(kept[1].errors)
        verdict = judge(obj, now=now, stored=True)
        if key is not None:
            self._kept[name] = (key, verdict)
        return list(verdict.errors)

    def forget(self, name: str) -> None:
        self._kept.pop(name, None)

    def __len__(self) -> int:
        return len(self._kept)


def _verdict_key(obj: Json) -> tuple[str, bytes | None]:
    """The name ``obj`` is remembered by, and a digest of what ``judge`` reads of it (None:
    not JSON, never remembered)."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return "", None
    read = [
        obj.get("apiVersion"),
        metadata.get("uid"),
        metadata.get("creationTimestamp"),
        metadata.get("annotations"),
        obj.get("spec"),
    ]
    return metadata["name"], json_digest(read)


_STRAY_ANNOTATION: Final = (
    "is how a v1alpha1 object carries values it has no field for; a v1alpha2 object sets "
    "spec.values itself, and this annotation would be ignored: remove it"
)


def _annotation_text(metadata: Any) -> object:
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations.get(VALUES_ANNOTATION) if isinstance(annotations, Mapping) else None


def _stray_annotation(metadata: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    """A v1alpha2 object given v1alpha1's values annotation: added or changed by this write
    (an update that leaves one already stored as it was -- a label edit, a finalizer's
    removal -- is not refused for it). Conversion shows v1alpha1 readers the values the
    object has, not the annotation's."""
    text = _annotation_text(metadata)
    if text is None:
        return False
    return old is None or _annotation_text(old.get("metadata")) != text


def _malformed_annotation(metadata: Mapping[str, Any]) -> str | None:
    """What is wrong with a v1alpha1 object's values annotation, if anything: conversion
    leaves one it cannot read as it is, so only validation can say so."""
    text = _annotation_text(metadata)
    if text is None:
        return None
    try:
        values = orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError:
        values = None
    if not isinstance(values, dict):
        return (
            "must be a JSON object of v1alpha2 values (those v1alpha1 has no field for), "
            'e.g. {"proxy": {"nativeSidecar": true}}'
        )
    return None


def warnings_for(obj: Json, *, now: datetime.datetime | None = None) -> list[str]:
    """What an admitted object should be told: no anchor of its own, or one expiring soon."""
    if not isinstance(obj, Mapping) or _survey(obj.get("spec")).too_big:
        return []
    anchor = served_field(TRUST_ANCHOR, version_of(obj))
    spec = to_hub(obj).get("spec")
    identity = _path(spec, "global", "identityContext")
    pem = identity.get("trustAnchorsPEM") if isinstance(identity, Mapping) else None
    if not isinstance(pem, str) or not pem.strip():
        return [
            f"{anchor} is not set: the trust anchor already in the cluster's "
            "linkerd-config ConfigMap is kept (nothing is written if it holds none)"
        ]
    moment = now or datetime.datetime.now(datetime.UTC)
    found: list[str] = []
    blocks, _ = x509_reader.pem_blocks(pem)
    for index, block in enumerate(blocks, start=1):
        try:
            ends = x509_reader.read_block(block).not_after
        except x509_reader.CertificateError:
            continue
        if moment <= ends < moment + _EXPIRY_WARNING:
            found.append(
                f"{anchor}: certificate {index} expires soon ({_when(ends)}): "
                "rotate the trust anchor before then"
            )
    return found


# -- the rules ---------------------------------------------------------------------------------


class _Checker:
    """Collects FieldErrors in the order the fields appear; never raises on odd input."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now
        self.moments: list[datetime.datetime] = []
        """The moments compared with ``now``: where the answer may change."""
        self.errors: list[FieldError] = []
        self._seen: set[FieldError] = set()
        self._settled: set[str] = set()
        """Fields refused by ``strings``: no further message about them."""

    def fail(self, field: str, message: str) -> None:
        if field in self._settled:
            return
        if len(message) > _MAX_MESSAGE_CHARS:  # messages quote input, which may be huge
            message = f"{message[: _MAX_MESSAGE_CHARS - 3]}..."
        error = FieldError(field, message)
        if error not in self._seen:
            self._seen.add(error)
            self.errors.append(error)

    def result(self) -> list[FieldError]:
        return list(self.errors)

    def stands_until(self) -> datetime.datetime | None:
        """The first moment compared with ``now`` that is still ahead: until then every
        comparison comes out as it did."""
        return min((m for m in self.moments if m >= self.now), default=None)

    # -- structure -------------------------------------------------------------------------

    def section(self, parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = parent.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(f"{path}.{key}", "must be an object")
            return {}
        return value

    def check(self, spec: Mapping[str, Any]) -> None:
        """Every stated field against its grammar (the field table's: what the schema says,
        exactly, and the checks it cannot express), then what relates fields."""
        for stated in spec_leaves(spec):
            row = stated.row
            if row is None:
                problems = [("", stated.problem)]
            elif row.required and stated.value == "":
                problems = [("", f"is required, e.g. {row.grammar.example}")]
            else:
                problems = row.grammar.problems(stated.value)
            for suffix, problem in problems:
                self.fail(stated.field + suffix, problem)
                self._settled.add(stated.field + suffix)
        global_ = self.section(spec, "global", "spec")
        proxy = self.section(spec, "proxy", "spec")
        identity = self.section(global_, "identityContext", "spec.global")
        self.trust_anchor(identity.get("trustAnchorsPEM"))
        self.versions(global_, proxy)
        self.resources(proxy.get("resource"))
        rollout = self.section(spec, "rollout", "spec")
        self.strings(rollout, _schema_at("spec.rollout"), "spec.rollout")
        for key in ("restartInterval", "progressDeadline"):
            self.duration(rollout, key, "spec.rollout")
        self.one_of(rollout, "onFailure", "spec.rollout")
        paused = rollout.get("paused")
        if paused is not None and not isinstance(paused, bool):
            self.fail("spec.rollout.paused", "must be true or false")
        batch = rollout.get("maxRestartsPerPass")
        if batch is not None and (
            isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10000
        ):
            self.fail(
                "spec.rollout.maxRestartsPerPass",
                f"{_show(batch)} must be a whole number of at least 1 (and at most 10000)",
            )
        # spec.rollout.canary: its duration here, its count and selectors canary's.
        self.duration(self.section(rollout, "canary", "spec.rollout"), "stableFor",
                      "spec.rollout.canary")  # fmt: skip
        for field, message in canary_problems(rollout.get("canary")):
            self.fail(field, message)

    # -- every string: the schema's bounds, no control characters --------------------------

    def strings(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        """Each string of ``value`` against its field's schema: at most ``maxLength``, no
        control character. Follows the schema's own properties only: its depth bounds the
        walk (unknown fields are the format's to name)."""
        if isinstance(value, Mapping):
            properties = schema.get("properties") or {}
            for key, child in value.items():
                if key in properties:
                    self.strings(child, properties[key], f"{path}.{key}")
            return
        if isinstance(value, list):
            items = schema.get("items")
            if isinstance(items, Mapping):
                for index, item in enumerate(value):
                    self.strings(item, items, f"{path}[{index}]")
            return
        problem = _string_problem(value, schema, path)
        if problem is not None:
            self.fail(path, problem)
            self._settled.add(path)

    # -- trust anchor --------------------------------------------------------------------

    def trust_anchor(self, pem: Any) -> None:
        """Absent is fine (the cluster's anchor is kept); present must be usable CA certs."""
        if pem is None:
            return
        if not isinstance(pem, str):
            self.fail(TRUST_ANCHOR, "must be a string of PEM certificates")
            return
        if not pem.strip():
            return
        if len(pem) > _MAX_PEM_CHARS:
            self.fail(TRUST_ANCHOR, f"is longer than {_MAX_PEM_CHARS} characters")
            return
        blocks, unpaired = x509_reader.pem_blocks(pem)
        if unpaired:
            self.fail(TRUST_ANCHOR, "is not PEM: its -----BEGIN and -----END lines do not pair up")
        elif not blocks:
            self.fail(TRUST_ANCHOR, "is not PEM: no -----BEGIN CERTIFICATE----- block found")
        if len(blocks) > _MAX_CERTIFICATES:
            self.fail(TRUST_ANCHOR, f"holds more than {_MAX_CERTIFICATES} PEM blocks")
            return
        for index, block in enumerate(blocks, start=1):
            which = (
                f"certificate {index} of {len(blocks)}" if len(blocks) > 1 else "the certificate"
            )
            if block.begin != block.end:
                self.fail(
                    TRUST_ANCHOR,
                    f"{which} begins as {block.begin or 'nameless'} but ends as "
                    f"{block.end or 'nameless'}",
                )
            elif block.begin != "CERTIFICATE":
                self.fail(
                    TRUST_ANCHOR,
                    f"{which} is a {block.begin or 'nameless'} PEM block, not a CERTIFICATE",
                )
            else:
                for problem in _anchor_problems(block, self.now, self.moments):
                    self.fail(TRUST_ANCHOR, f"{which} {problem}")

    # -- versions and names ----------------------------------------------------------------

    def versions(self, global_: Mapping[str, Any], proxy: Mapping[str, Any]) -> None:
        """The proxy version is what a LinkerdConfig rolls out: always required. A separate
        proxy-init image exists only in the legacy format's releases, so its version is
        required unless admission's guess at the target release reads the values format.
        What is wrong with the guessed version itself is ``target_release``'s to say, on the
        field it came from (unless that field is already refused)."""
        guessed = guess({"global": global_, "proxy": proxy})
        refused: list[FieldError] = []
        try:
            modern = guessed is not None and isinstance(guessed.format(), HelmValuesFormat)
        except FormatError as error:
            refused, modern = error.errors, False
        required = ("proxyVersion",) if modern else ("proxyVersion", "proxyInitImageVersion")
        for key, example in (("proxyVersion", "edge-19.12.3"), ("proxyInitImageVersion", "v1.2.0")):
            field = f"spec.proxy.{key}"
            value = proxy.get(key)
            if value is None or value == "":
                if key in required:
                    self.fail(field, f"is required, e.g. {example}")
            elif not isinstance(value, str):
                self.fail(field, f"must be a string, e.g. {example}")
            elif not _IMAGE_TAG.fullmatch(value):
                self.fail(field, f"{_show(value)} is not an image tag, e.g. {example}")
        reported = {e.field for e in self.errors}
        for field, problem in refused:
            if not _within(field, reported):
                self.fail(field, problem)

    def one_of(self, parent: Mapping[str, Any], key: str, path: str) -> None:
        """A field with a closed set of values: the schema's ``enum`` (its one owner)."""
        value = parent.get(key)
        allowed = _schema_at(f"{path}.{key}").get("enum") or []
        if value is not None and value not in allowed:
            self.fail(f"{path}.{key}", f"must be one of {', '.join(map(str, allowed))}")

    # -- durations, ports, log level, resources ---------------------------------------------

    def duration(self, parent: Mapping[str, Any], key: str, path: str) -> None:
        """A rollout duration: the grammar the schema states, and positive."""
        value = parent.get(key)
        if value is not None:
            for _, problem in ROLLOUT_DURATION.problems(value):
                self.fail(f"{path}.{key}", problem)

    def ports(self, proxy: Mapping[str, Any]) -> None:
        """The four proxy ports all differ (the schema's CEL rule; each port's own grammar is
        the field table's)."""
        seen: dict[int, str] = {}
        for key in _PORT_FIELDS:
            value = proxy.get(key)
            if isinstance(value, bool) or not isinstance(value, int):
                continue  # absent (defaulted, or kept as the cluster has it), or refused
            if value in seen:
                self.fail(f"spec.proxy.{key}", f"must differ from {seen[value]} (both are {value})")
            else:
                seen[value] = key

    def resources(self, value: Any) -> None:
        """Each limit at least its request (each amount's grammar is the field table's)."""
        if not isinstance(value, Mapping):
            return
        requests, limits = value.get("requests"), value.get("limits")
        if not (isinstance(requests, Mapping) and isinstance(limits, Mapping)):
            return
        for name, amount in limits.items():
            limit, request = quantity_value(amount), quantity_value(requests.get(name))
            if limit is not None and request is not None and limit < request:
                self.fail(
                    f"spec.proxy.resource.limits.{name}",
                    f"must be at least the request ({_show(requests.get(name))})",
                )

    # -- relations to the old object and to other LinkerdConfigs -----------------------------

    def immutable(self, old: Json, new: Json) -> None:
        for key in ("linkerdNamespace", "configMap"):
            before, after = old["global"].get(key), new["global"].get(key)
            if before != after:
                self.fail(
                    f"spec.global.{key}",
                    f"is immutable: it was {_show(before)}; to manage another ConfigMap, "
                    "create a new LinkerdConfig",
                )

    def ownership(
        self,
        obj: Mapping[str, Any],
        metadata: Mapping[str, Any],
        spec: Json,
        creating: bool,
        others: Iterable[Json],
    ) -> None:
        """One LinkerdConfig per ConfigMap: refuse a rival, naming the object that owns it."""
        name = metadata.get("name")
        rivals = [c for c in others if _comparable(c) and c["metadata"]["name"] != name]
        this: Json = {"metadata": {"name": str(name or "")}, "spec": spec}
        target = target_of(this)
        if not creating:  # reconcile's rule decides: the oldest, then the first by name
            created = metadata.get("creationTimestamp")
            this["metadata"]["creationTimestamp"] = created if isinstance(created, str) else ""
            rivals.append(this)
        owner = owner_among(rivals, target)
        if owner is not None and owner is not this:
            field = "spec.global.configMap"
            self.fail(
                field,
                f"ConfigMap {target} is already managed by LinkerdConfig "
                f"{owner['metadata']['name']!r}; one LinkerdConfig per ConfigMap",
            )

    # -- what the target Linkerd version can express ---------------------------------------

    def format(self, spec: Mapping[str, Any], full: Json) -> None:
        """Ask the target release's format what it refuses, unless already reported.

        The target is admission's guess (``target_release.guess``: reconcile, which sees the
        cluster's version, decides again); errors about it are reported on the field it came
        from."""
        guessed = guess(spec)
        if guessed is None:
            return
        try:
            fmt = guessed.format()
        except FormatError:
            return  # reported by ``versions``, on the field the version came from
        identity = full["global"].get("identityContext")
        if isinstance(identity, dict):
            pem = identity.get("trustAnchorsPEM")
            if pem is None or (isinstance(pem, str) and not pem.strip()):
                identity["trustAnchorsPEM"] = _PLACEHOLDER_ANCHOR
        try:
            errors = guessed.address(fmt.check(full))
        except FormatError as error:
            errors = guessed.address(error.errors)
        except Exception as error:  # a format bug must not turn into an admission outage
            self.fail("spec", f"cannot be checked for Linkerd {fmt.version}: {error!r}")
            return
        reported = {e.field for e in self.errors}
        for field, message in errors:
            if not _within(field, reported):
                self.fail(field, message)


# -- helpers -------------------------------------------------------------------------------


def _string_problem(value: Any, schema: Mapping[str, Any], path: str) -> str | None:
    """What is wrong with ``value`` as the field ``schema`` describes (None if nothing this
    checks): longer than its maxLength, or a control character."""
    if not isinstance(value, str):
        return None  # a type the field's own check names (or an int-or-string's integer)
    limit = schema.get("maxLength")
    if isinstance(limit, int) and len(value) > limit:
        return f"is longer than {limit} characters"
    return character_problem(value, multiline=path in _MULTILINE)


def _schema_at(path: str) -> Mapping[str, Any]:
    """The schema of field ``path`` (``spec.proxy.logFormat``)."""
    schema: Mapping[str, Any] = _SPEC_SCHEMA
    for key in path.split(".")[1:]:
        schema = (schema.get("properties") or {})[key]
    return schema


def _anchor_problems(
    block: x509_reader.PemBlock, now: datetime.datetime, moments: list[datetime.datetime]
) -> list[str]:
    """Why one PEM certificate cannot be a Linkerd trust anchor; empty when it can. Its
    validity period's ends, which the answer depends on, are added to ``moments``."""
    try:
        cert = x509_reader.read_block(block)
    except x509_reader.CertificateError as error:
        return [f"does not parse as X.509 ({error})"]
    problems: list[str] = []
    subject = cert.subject or "empty subject"
    starts, ends = cert.not_before, cert.not_after
    moments += (starts, ends)
    if now > ends:
        problems.append(f"{subject!r} expired on {_when(ends)}")
    elif now < starts:
        problems.append(f"{subject!r} is not valid before {_when(starts)}")
    if cert.extensions_error is not None:
        problems.append(f"{subject!r} has unreadable extensions ({cert.extensions_error})")
    elif cert.ca is None:
        problems.append(f"{subject!r} is not a CA (no basicConstraints CA=true)")
    elif not cert.ca:
        problems.append(f"{subject!r} is not a CA (basicConstraints CA is false)")
    if cert.key_cert_sign is False:  # absent keyUsage allows every use
        problems.append(f"{subject!r} may not sign certificates (keyUsage lacks keyCertSign)")
    key = cert.public_key
    if key.kind == "ec":
        if key.curve not in _SUPPORTED_CURVES:
            problems.append(f"{subject!r} uses curve {key.curve}; use P-256 or P-384")
    elif key.kind == "rsa":
        if key.bits < _MIN_RSA_BITS:
            problems.append(f"{subject!r} has a {key.bits}-bit RSA key; use 2048 bits or more")
    elif key.kind != "ed25519":
        problems.append(
            f"{subject!r} has an unsupported key type ({key.algorithm}); "
            "use ECDSA P-256/P-384, RSA or Ed25519"
        )
    return problems


def _unchanged(old_spec: Any, spec: Mapping[str, Any]) -> bool:
    if not (defaultable(old_spec) and defaultable(spec)):
        return False
    return old_spec == spec or defaulted(dict(old_spec)) == defaulted(dict(spec))


def _comparable(config: Any) -> bool:
    """Whether ``config`` is shaped like a stored LinkerdConfig (it came from the cache)."""
    if not isinstance(config, dict):
        return False
    metadata = config.get("metadata")
    return (
        isinstance(metadata, dict)
        and isinstance(metadata.get("name"), str)
        and isinstance(metadata.get("creationTimestamp", ""), str)
        and defaultable(config.get("spec") or {})
    )


@dataclass(frozen=True, slots=True)
class _Survey:
    too_deep: bool = False
    too_many: bool = False
    long_strings: tuple[str, ...] = ()

    @property
    def too_big(self) -> bool:
        return self.too_deep or self.too_many


def _survey(spec: Any) -> _Survey:
    """Depth, size and overlong strings of ``spec``, iteratively and stopping at the first
    excess: every later check (and ``defaulted``'s deep copy) is then cheap and safe."""
    count = 0
    long_strings: list[str] = []
    stack: list[tuple[Any, int, str]] = [(spec, 1, "spec")]
    while stack:
        item, level, path = stack.pop()
        if isinstance(item, str):
            if len(item) > _MAX_STRING_CHARS and len(long_strings) < _MAX_REPORTED:
                long_strings.append(path)
            continue
        if not isinstance(item, (Mapping, list)):
            continue
        if level > _MAX_DEPTH:
            return _Survey(too_deep=True)
        count += len(item)
        if count > _MAX_VALUES:
            return _Survey(too_many=True)
        if isinstance(item, Mapping):
            stack.extend((child, level + 1, f"{path}.{key}") for key, child in item.items())
        else:
            stack.extend((child, level + 1, f"{path}[{i}]") for i, child in enumerate(item))
    return _Survey(long_strings=tuple(sorted(long_strings)))


def _path(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _within(field: str, reported: set[str]) -> bool:
    """Whether ``field`` or a field containing it was reported already."""
    if field in reported:
        return True
    return any(field[:i] in reported for i, char in enumerate(field) if char in ".[")


def _when(moment: datetime.datetime) -> str:
    return rfc3339(moment)


def _show(value: Any, limit: int = 64) -> str:
    """A value for a message: quoted, and cut short so huge input makes no huge answer."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
