"""The trust-anchor guard: no anchor leaves the trust bundle while a meshed pod still needs it.

Linkerd's proxies trust the anchors they were injected with (the injector copies the bundle
into each pod), and only a restart gives a pod another bundle. The safe rotation is: add the
new anchor beside the old one, restart every meshed pod, switch the issuer, then drop the old
anchor. Dropping it before every pod has the bundle with the new one broke meshes (linkerd2
#4287: a 12-minute partial outage). This module decides, purely, whether a new bundle may be
written now.

**What Linkerd says about a pod.** From edge-22.9.1 / stable-2.12.1 (linkerd2 #9361), the
injector stamps every pod it injects with ``linkerd.io/trust-root-sha256``: the lowercase hex
SHA-256 of the exact bytes of the bundle it injected, the file ``ca-bundle.crt`` of the
ConfigMap ``linkerd-identity-trust-roots`` as mounted (``pkg/inject``'s ``injectObjectMeta``,
``controller/proxy-injector/webhook.go``; nothing trimmed). Every injected pod is labelled
``linkerd.io/control-plane-ns=<Linkerd's namespace>`` (Linkerd's own ``IsMeshed``), opted in
to restarts or not: the guard reads those pods, every phase that may still run.

**The rule.** A bundle that drops no anchor (added anchors, the same anchors re-ordered or
re-formatted) is written. One that drops anchors is held while any meshed pod carries the hash
of a bundle lacking one of the anchors the new bundle *keeps* (those it shares with the current
one), or a hash the controller cannot map to a bundle it knows (a bundle it never saw could
lack anything). A new bundle that keeps none of the anchors the mesh trusts (a swap, [A] to
[B]) is never written at once: pods on the old and the new bundle would trust no common anchor
(linkerd2 #4287's outage). It is staged as a rotation: held while any meshed pod runs a bundle
lacking one of the new anchors, the bundle holding both (the old anchors, then the new) written
and rolled out meanwhile, then the new one alone once every pod trusts its anchors; ``plan``
says so first.

**The issuer.** The rotation's third step re-issues the issuer from the new anchor; Linkerd's
identity takes it up from its mounted Secret and records ``IssuerUpdated`` on its Deployment.
A proxy that started before still presents a certificate from the issuer before (chained to
the old anchor) until it renews it, at 70 % of the certificate's lifetime. So a removal also
waits for the meshed pods created before the issuer's latest update (``IssuerUpdate``: the
Events, cached by ``caches.LinkerdCaches.issuer_events``, kept in ``status.
identityIssuerUpdated`` since they expire), until they restart or every certificate issued
before has expired (the update plus ``identity.issuer.issuanceLifetime`` from the values),
when the reconcile looks again by itself (``Guard.recheck_after``). It reads no Secret: an
issuer swapped while identity restarted records no Event, and is not seen.

**What it cannot see.** Pods without the annotation: proxies injected by releases before
edge-22.9.1 / stable-2.12.1 (or before an upgrade to one), counted and said, never guessed.
The legacy format (Linkerd up to edge-20.10.1) and the values format before edge-22.9.1 stamp
nothing: there the guard does not apply, and a drop is written with a warning saying so.

**Which bundles the controller knows.** A pod's hash maps to anchors only for a bundle the
controller parsed. The ConfigMaps hold only the current bundle (the preserved copy of the
trust roots holds the same text, or none when the spec writes the key), but pods run whatever
bundle was current when they started. So the LinkerdConfig's own status keeps the record
(``status.trustBundles``: each bundle's hash and its anchors' SHA-256, the newest
``MAX_KNOWN_BUNDLES``): the status is written only by the leader and read by any new one, and
it survives restarts. When the bundle changes, the current one is recorded, and the new one
once it is written (a bundle written by someone else, Helm say, is recorded when the next
change replaces it). A record lost or cut short only makes the guard stricter (an unknown hash
holds), never looser.

Parsing is bounded (``MAX_BUNDLE_CHARS``, ``MAX_CERTIFICATES``, one linear scan of the PEM
markers) and cached by the bundle's hash: a reconcile whose bundle did not change parses
nothing. A bundle that does not parse is an error naming the ConfigMap and key (or the field).
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import re
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from linkerd_config.kube import x509_reader
from linkerd_config.kube.field_tree import reads
from linkerd_config.kube.resource import Json, Keyed, go_seconds, rfc3339, unix_time
from linkerd_config.kube.shared_records import SharedRecords
from linkerd_config.linkerd.configmap.desired import Desired, preserved_name
from linkerd_config.linkerd.formats import FormatError, Installed, format_for
from linkerd_config.linkerd.formats.helm_values import (
    TRUST_ROOTS_CONFIGMAP,
    TRUST_ROOTS_KEY,
    issuance_lifetime,
)
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.spec.crd import (
    ISSUER_UPDATED_FIELD,
    TRUST_BUNDLES_FIELD,
    TRUST_HOLD_FIELD,
)

MESHED_LABEL: Final = "linkerd.io/control-plane-ns"
"""Linkerd's injector labels every pod it injects with its control plane's namespace."""
LIVE_FIELD_SELECTOR: Final = "status.phase!=Succeeded,status.phase!=Failed"
"""Pods that run, or will: a Pending pod starts with the bundle it was injected with."""

MAX_BUNDLE_CHARS: Final = 256 * 1024
"""As ``formats.bounded``: room for the largest bundle a LinkerdConfig states (64 KiB) and more."""
MAX_CERTIFICATES: Final = 100
MAX_KNOWN_BUNDLES: Final = 16
MAX_LISTED_PODS: Final = 20
"""Pods named in a hold (status, condition, plan); the rest are counted."""
HELD_REASON: Final = "TrustAnchorRemovalHeld"
ISSUER_UPDATED_REASON: Final = "IssuerUpdated"
"""The Event Linkerd's identity records (on its Deployment, ``linkerd-identity``) each time it
takes up the issuer its mounted Secret holds now (``pkg/identity``'s ``Run``)."""
IDENTITY_DEPLOYMENT: Final = "linkerd-identity"
ISSUER_EVENTS_SELECTOR: Final = (
    f"reason={ISSUER_UPDATED_REASON},involvedObject.kind=Deployment,"
    f"involvedObject.name={IDENTITY_DEPLOYMENT}"
)
ISSUER_EVENT_FIELDS: Final = ("firstTimestamp", "lastTimestamp", "eventTime", "series")
"""What the guard reads of such an Event: when it happened (a repeated one: its last)."""
ISSUER_MARGIN: Final = 60.0
"""Seconds added to an issuer's update: identity's replicas reload it from their mounted
Secret a little apart, a pod's creation time is read to the minute, and clocks differ."""
DEFAULT_ISSUANCE_LIFETIME: Final = 24 * 3600.0
"""Linkerd's default ``identity.issuer.issuanceLifetime`` (24h0m0s)."""
SPEC_FIELD: Final = "spec.global.identityContext.trustAnchorsPEM"
_HEX64: Final = re.compile(r"[0-9a-f]{64}")


class BundleError(FormatError):
    """A trust bundle that cannot be read: where it is (``ConfigMap ns/name, key k``, or the
    spec's field) and why."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        super().__init__([(where, problem)])


class MeshUnseen(Exception):
    """The meshed pods cannot be seen yet (their cache has not filled): no change of bundle
    can be judged, so none is made; the caller tries again shortly."""


@dataclass(frozen=True, order=True)
class Anchor:
    """One trust anchor: the SHA-256 of its DER (what identifies it in any bundle, however
    the bundle is ordered or formatted), and its subject, for people."""

    sha256: str
    subject: str = field(compare=False, default="")

    def __str__(self) -> str:
        subject = self.subject if len(self.subject) <= 256 else f"{self.subject[:255]}…"
        return f"{subject or 'anchor'} (sha256 {self.sha256[:16]})"


@dataclass(frozen=True)
class Bundle:
    """A bundle as Linkerd's injector stamps it (the hash of its text) and its anchors."""

    sha256: str
    anchors: tuple[Anchor, ...]

    @property
    def fingerprints(self) -> frozenset[str]:
        return frozenset(a.sha256 for a in self.anchors)


def bundle_hash(text: str) -> str:
    """What Linkerd's injector writes in ``linkerd.io/trust-root-sha256`` for ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


_PARSED: OrderedDict[str, Bundle] = OrderedDict()
_PARSED_MAX: Final = 64


def parse_bundle(text: str, where: str) -> Bundle:
    """The anchors of PEM bundle ``text`` (read from ``where``); BundleError naming it when
    it is too large, not PEM, holds no certificate or one that is not X.509. Blocks of other
    types are no anchors and are passed over. Cached by the text's hash (errors are not: a
    refusal costs one bounded scan)."""
    digest = bundle_hash(text)
    cached = _PARSED.get(digest)
    if cached is not None:
        _PARSED.move_to_end(digest)
        return cached
    bundle = Bundle(digest, _anchors(text, where))
    _PARSED[digest] = bundle
    while len(_PARSED) > _PARSED_MAX:
        _PARSED.popitem(last=False)
    return bundle


def _anchors(text: str, where: str) -> tuple[Anchor, ...]:
    def refuse(problem: str) -> BundleError:
        return BundleError(where, problem)

    if len(text) > MAX_BUNDLE_CHARS:
        raise refuse(f"the trust bundle is longer than {MAX_BUNDLE_CHARS} characters")
    found, unpaired = x509_reader.pem_blocks(text)
    if unpaired == "BEGIN":
        raise refuse("not PEM: a -----BEGIN line without its -----END")
    if unpaired or any(block.begin != block.end for block in found):
        raise refuse("not PEM: its -----BEGIN and -----END lines do not pair up")
    blocks = [block for block in found if block.begin == "CERTIFICATE"]
    if len(blocks) > MAX_CERTIFICATES:
        raise refuse(f"the trust bundle holds more than {MAX_CERTIFICATES} certificates")
    if not blocks:
        raise refuse("the trust bundle holds no -----BEGIN CERTIFICATE----- block")
    anchors: list[Anchor] = []
    for index, block in enumerate(blocks, start=1):
        try:
            cert = x509_reader.read_block(block)
        except x509_reader.CertificateError as error:
            raise refuse(f"certificate {index} does not parse as X.509 ({error})") from error
        fingerprint, subject = cert.fingerprint, cert.subject
        anchors.append(Anchor(fingerprint, subject))
    return tuple(anchors)


# -- which bundle changes, where -------------------------------------------------------------


@dataclass(frozen=True)
class BundleChange:
    """The bundle Linkerd's injector hands to pods now, and the one it would after the write."""

    current: str | None
    desired: str | None
    where: str
    """``namespace/name`` of the ConfigMap that holds it."""
    key: str
    guarded: bool
    """Whether pods say which bundle they run (the release stamps the annotation)."""
    linkerd_version: str
    written: str | None = None
    """The bundle this controller last wrote there, as its preserved copy keeps it: what the
    injector handed out before the ConfigMap was deleted or edited by someone else."""
    stated: bool = True
    """Whether ``desired`` is the spec's (False: the spec states no anchor, and ``desired``
    is what the cluster holds, someone else's to write)."""

    @property
    def desired_where(self) -> str:
        """Where ``desired`` comes from, for messages: the spec's field, or the ConfigMap."""
        return SPEC_FIELD if self.stated else f"ConfigMap {self.where}, key {self.key}"


def bundle_change(desired: Desired, current: Mapping[str, Mapping[str, str]]) -> BundleChange:
    """Where the injector's bundle lives for ``desired``'s release, what it holds now
    (``current``: the data of the target namespace's ConfigMaps by name, as
    ``desired.current_data`` reads them) and what it will hold once ``desired`` is written.
    InstalledDataError when the installed data cannot be read (the reconcile has read it
    already, so it does not happen there)."""
    namespace, version = desired.target.namespace, desired.linkerd_version
    stated = desired.anchors_stated
    if TRUST_ROOTS_CONFIGMAP in desired.depends_on:  # the injector reads the trust roots
        now = (current.get(TRUST_ROOTS_CONFIGMAP) or {}).get(TRUST_ROOTS_KEY)
        then = (desired.companions.get(TRUST_ROOTS_CONFIGMAP) or {}).get(TRUST_ROOTS_KEY, now)
        where = f"{namespace}/{TRUST_ROOTS_CONFIGMAP}"
        written = (current.get(preserved_name(TRUST_ROOTS_CONFIGMAP)) or {}).get(TRUST_ROOTS_KEY)
        return BundleChange(
            now,
            then,
            where,
            TRUST_ROOTS_KEY,
            desired.proxy.trust_root_sha256 is not None,
            version,
            written,
            stated,
        )
    fmt = format_for(version)
    where = str(desired.target)
    now = fmt.trust_anchors(Installed(where, current.get(desired.target.name) or {}, current))
    then = fmt.trust_anchors(Installed(where, desired.data, current))
    key = "values" if desired.config_format == "values" else "global"
    return BundleChange(now, then, where, key, False, version, stated=stated)


# -- the record of known bundles ---------------------------------------------------------------


def known_bundles(status: Json | None) -> dict[str, frozenset[str]]:
    """A status record's bundles: hash -> its anchors' SHA-256. Anything malformed in it (the
    status is the controller's, but anyone allowed to patch status may edit it) is skipped:
    an entry missing only makes the guard stricter."""
    found: dict[str, frozenset[str]] = {}
    entries = (status or {}).get(TRUST_BUNDLES_FIELD)
    if not isinstance(entries, list):
        return found
    for entry in entries[-MAX_KNOWN_BUNDLES:]:
        if not isinstance(entry, dict):
            continue
        digest, anchors = entry.get("sha256"), entry.get("anchors")
        if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
            continue
        if not isinstance(anchors, list) or not anchors or len(anchors) > MAX_CERTIFICATES:
            continue
        if all(isinstance(a, str) and _HEX64.fullmatch(a) for a in anchors):
            found[digest] = frozenset(anchors)
    return found


def recorded(status: Json | None, *bundles: Bundle) -> list[Json]:
    """The status record with ``bundles`` added (newest last), the newest
    ``MAX_KNOWN_BUNDLES`` kept. A bundle already there keeps its place: re-seeing the current
    bundle on every reconcile changes nothing."""
    known = known_bundles(status)
    entries = [{"sha256": h, "anchors": sorted(a)} for h, a in known.items()]
    for bundle in bundles:
        if bundle.sha256 not in known:
            known[bundle.sha256] = bundle.fingerprints
            entries.append({"sha256": bundle.sha256, "anchors": sorted(bundle.fingerprints)})
    return entries[-MAX_KNOWN_BUNDLES:]


# -- the decision ----------------------------------------------------------------------------


@dataclass(frozen=True)
class IssuerUpdate:
    """Linkerd's identity took up a new issuer at ``at`` (wall time of its ``IssuerUpdated``
    Event, kept in status once seen), and certificates it issues last ``lifetime`` seconds.
    A proxy that started before may still present a certificate from the issuer before,
    chained to an anchor a new bundle drops, until it renews it (a proxy does at 70 % of
    the certificate's lifetime); ``until`` the last certificate issued before has expired,
    so none can, and the removal no longer waits for such a pod."""

    at: float
    lifetime: float = DEFAULT_ISSUANCE_LIFETIME

    @property
    def until(self) -> float:
        return self.at + self.lifetime + ISSUER_MARGIN

    def predates(self, created: float | None) -> bool:
        """Whether a pod created at ``created`` may run a proxy with a certificate from the
        issuer before (an unreadable time may: the safe side)."""
        return created is None or created <= self.at + ISSUER_MARGIN


@dataclass(frozen=True)
class IssuerHold:
    """Pods a removal waits for because their proxies started before the issuer's update."""

    update: IssuerUpdate
    pods: tuple[str, ...]
    """``namespace/name`` of the first ``MAX_LISTED_PODS`` of them, sorted."""
    count: int

    def as_json(self) -> Json:
        return {
            "issuerUpdatedAt": rfc3339(self.update.at),
            "until": rfc3339(self.update.until),
            "pods": list(self.pods),
            "podCount": self.count,
        }


@dataclass(frozen=True)
class Hold:
    """Why a new bundle is not written: the pods that still need what it drops."""

    required: tuple[Anchor, ...]
    """The anchors every pod must already trust (those the new bundle keeps)."""
    pods: tuple[str, ...]
    """``namespace/name`` of the first ``MAX_LISTED_PODS`` holding pods, sorted."""
    count: int
    """All holding pods."""
    unknown: int
    """Of those, pods whose hash maps to no bundle the controller knows."""
    issuer: IssuerHold | None = None
    """Pods on a bundle with every anchor kept whose certificates may still be from the
    issuer before (the rotation's last step, before their proxies renewed them)."""

    def as_json(self) -> Json:
        found: Json = {
            "required": [str(a) for a in self.required],
            "pods": list(self.pods),
            "podCount": self.count,
            "unknownBundlePods": self.unknown,
        }
        if self.issuer is not None:
            found["issuer"] = self.issuer.as_json()
        return found


@dataclass(frozen=True)
class Decision:
    """Whether a bundle change may be written, and what to say about it."""

    dropped: tuple[Anchor, ...] = ()
    """Anchors of the current bundle the new one does not hold."""
    hold: Hold | None = None
    guarded: bool = True
    """False where pods say nothing about their bundle (the guard does not apply)."""
    unseen: int = 0
    """Meshed pods that carry no trust-root hash (injected before edge-22.9.1 /
    stable-2.12.1): the guard cannot see which bundle they run."""
    where: str = ""
    """``ConfigMap namespace/name, key k``: the bundle in question."""
    linkerd_version: str = ""
    swap: bool = False
    """Anchors dropped and none kept: staged as a rotation (held while a pod lacks one of
    the new anchors, the bundle with both written meanwhile)."""

    @property
    def held(self) -> bool:
        return self.hold is not None

    def message(self, holding: bool = True, theirs: bool = False) -> str:
        """The condition message of a hold, the Event of a removal; empty when nothing drops.
        ``holding``: the bundle that keeps both the old and the new anchors is written and
        rolled out meanwhile (False: nothing is). ``theirs``: the new bundle is someone
        else's, already in the ConfigMap (the spec states none)."""
        if not self.dropped:
            return ""
        dropped = ", ".join(str(a) for a in self.dropped)
        unseen = (
            f"; {self.unseen} meshed pod(s) carry no linkerd.io/trust-root-sha256 (injected "
            "before edge-22.9.1 / stable-2.12.1) and could not be checked"
            if self.unseen
            else ""
        )
        if not self.guarded and self.swap:
            return (
                f"{self.where} not written: the new trust bundle drops {dropped} and keeps none "
                f"of the current anchors, and Linkerd {self.linkerd_version}'s injector stamps "
                "no trust-root hash on pods, so which pods run which bundle cannot be seen: "
                "written at once, pods on the old and on the new bundle would trust no common "
                "anchor. Apply a bundle holding both (the old anchors, then the new) first, "
                "restart every meshed pod onto it, then this one"
            )
        if not self.guarded:
            return (
                f"the new trust bundle in {self.where} drops {dropped}; Linkerd "
                f"{self.linkerd_version}'s injector stamps no trust-root hash on pods, so "
                "which pods still need it cannot be seen: restart every meshed pod onto a "
                "bundle holding both the old and the new anchors before removing one"
            )
        if self.swap and self.hold is None:
            return (
                f"the new trust bundle in {self.where} drops {dropped} and keeps none of the "
                "current anchors: no meshed pod stamped with a trust-root hash runs a bundle "
                f"lacking the new ones, so none is left without a common anchor{unseen}"
            )
        if self.hold is None:
            return (
                f"the new trust bundle in {self.where} drops {dropped}: every meshed pod "
                f"stamped with a trust-root hash already trusts the anchors it keeps{unseen}"
            )
        hold = self.hold
        if hold.count == 0 and hold.issuer is not None:
            return self._issuer_message(dropped, holding, theirs, hold.issuer) + unseen
        shown = ", ".join(hold.pods)
        more = f" and {hold.count - len(hold.pods)} more" if hold.count > len(hold.pods) else ""
        unknown = (
            f" ({hold.unknown} of them on a bundle this controller never read)"
            if hold.unknown
            else ""
        )
        required = ", ".join(str(a) for a in hold.required)
        meanwhile = (
            "Meanwhile the bundle that keeps both the old and the new anchors stays written "
            "(restored if deleted, put back if edited) and the rollout restarts the opted-in "
            "ones onto it; restart the others"
            if holding
            else "Meanwhile nothing is written or restarted; restart them onto a bundle that "
            "keeps both the old and the new anchors"
        )
        head = (
            f"the trust bundle someone else wrote in {self.where} drops {dropped}"
            if theirs
            else f"{self.where} not written: the new trust bundle drops {dropped}"
        )
        if self.swap:
            staged = (
                "it keeps none of the anchors the mesh trusts now, so written at once it "
                "would leave pods on the old and on the new bundle with no common anchor; it "
                "is staged as a rotation"
            )
            return (
                f"{head}: {staged}, and {hold.count} meshed pod(s) run with a bundle lacking "
                f"{required}, which it brings{unknown}: {shown}{more}. {meanwhile}, and the "
                f"new bundle alone is written by itself once every meshed pod trusts its "
                f"anchors{unseen}"
            )
        issuer = "" if hold.issuer is None else f"; then {_issuer_wait(hold.issuer)}"
        return (
            f"{head}, and {hold.count} meshed pod(s) still run with a bundle lacking "
            f"{required}, which it keeps{unknown}: {shown}{more}. {meanwhile}, and the removal "
            f"proceeds by itself{issuer}{unseen}"
        )

    def _issuer_message(self, dropped: str, holding: bool, theirs: bool, held: IssuerHold) -> str:
        head = (
            f"the trust bundle someone else wrote in {self.where} drops {dropped}"
            if theirs
            else f"{self.where} not written: the new trust bundle drops {dropped}"
        )
        meanwhile = (
            "the bundle that keeps both the old and the new anchors stays written meanwhile"
            if holding
            else "nothing is written meanwhile"
        )
        return f"{head}, and {_issuer_wait(held)}; {meanwhile}"

    def as_json(self) -> Json:
        return {
            "dropped": [str(a) for a in self.dropped],
            "guarded": self.guarded,
            "held": self.held,
            "swap": self.swap,
            "hold": None if self.hold is None else self.hold.as_json(),
            "podsWithoutHash": self.unseen,
            "message": self.message(),
        }


def _issuer_wait(held: IssuerHold) -> str:
    shown = ", ".join(held.pods)
    more = f" and {held.count - len(held.pods)} more" if held.count > len(held.pods) else ""
    return (
        f"{held.count} meshed pod(s) started before Linkerd's identity took up its current "
        f"issuer ({ISSUER_UPDATED_REASON} at {rfc3339(held.update.at)}): their proxies may "
        f"still present a certificate from the issuer before, chained to an anchor it drops, "
        f"until they renew it: {shown}{more}. The removal proceeds by itself once none is "
        f"left, by {rfc3339(held.update.until)} at the latest (the certificates' lifetime "
        f"{go_seconds(held.update.lifetime)} since the update), or sooner as they restart"
    )


def decide(
    current: Bundle,
    desired: Bundle,
    known: Mapping[str, frozenset[str]],
    pods: Iterable[Keyed],
    *,
    where: str = "",
    linkerd_version: str = "",
    issuer: IssuerUpdate | None = None,
    now: float = 0.0,
) -> Decision:
    """May ``desired`` replace ``current`` now, given the bundles the controller knows (hash
    -> anchors' SHA-256) and the meshed pods (by ``namespace/name``, their cached record:
    their ``linkerd.io/trust-root-sha256`` and when they were created)?

    A removal also waits, until ``issuer.until``, for the pods created before the issuer's
    last update (``issuer``, at wall time ``now``): the rotation's last step, [A,B] to [B]
    once the issuer is re-issued from B, must not come before every proxy presents a
    certificate from the new issuer (a pod on [B] alone rejects one chained to A).

    What the mesh trusts now is the current bundle *and* every anchor of the known bundles
    meshed pods run (``in_use``): however the current bundle is learned (read from the
    ConfigMap, from the copy kept of it once it was deleted, or edited by someone else), an
    anchor a running pod holds is never dropped unseen (issue 37, finding 1)."""
    keep = desired.fingerprints
    bundles = {**known, current.sha256: current.fingerprints, desired.sha256: keep}
    pods = list(pods)
    current = in_use(current, bundles, pods)
    dropped = tuple(a for a in current.anchors if a.sha256 not in keep)
    if not dropped:
        return Decision(where=where, linkerd_version=linkerd_version)
    kept = tuple(a for a in desired.anchors if a.sha256 in current.fingerprints)
    swap = not kept
    if swap:  # nothing in common: a pod must come to trust the new anchors first
        kept = desired.anchors
    needed = frozenset(a.sha256 for a in kept)
    verdicts: dict[str, tuple[bool, bool]] = {}
    # hash -> (holds, unknown): a few distinct hashes among any number of pods.
    holding: list[str] = []
    count = unknown = unseen = 0
    for key, pod in pods:
        digest = _hash_of(pod)
        if digest is None:
            unseen += 1
            continue
        verdict = verdicts.get(digest)
        if verdict is None:
            anchors = bundles.get(digest)
            verdict = verdicts[digest] = (anchors is None or not needed <= anchors, anchors is None)
        if verdict[0]:
            count += 1
            unknown += verdict[1]
            holding.append(key)
    held_by_issuer = None
    if issuer is not None and now < issuer.until:
        before = [key for key, pod in pods if issuer.predates(_created(pod))]
        if before:
            shown = tuple(heapq.nsmallest(MAX_LISTED_PODS, before))
            held_by_issuer = IssuerHold(issuer, shown, len(before))
    hold = None
    if count or held_by_issuer is not None:
        listed = tuple(heapq.nsmallest(MAX_LISTED_PODS, holding))
        hold = Hold(tuple(sorted(kept)), listed, count, unknown, held_by_issuer)
    return Decision(dropped, hold, True, unseen, where, linkerd_version, swap)


def in_use(current: Bundle, bundles: Mapping[str, frozenset[str]], pods: Iterable[Keyed]) -> Bundle:
    """``current`` with every anchor of the known bundles ``pods`` run added (those the
    current bundle lacks are named by fingerprint only: their subjects are not known)."""
    have = current.fingerprints
    extra: set[str] = set()
    for digest in {_hash_of(pod) for _, pod in pods} - {None, current.sha256}:
        extra |= bundles.get(str(digest), frozenset()) - have
    if not extra:
        return current
    return Bundle(current.sha256, (*current.anchors, *(Anchor(f) for f in sorted(extra))))


def _created(pod: Json) -> float | None:
    return unix_time((pod.get("metadata") or {}).get(CREATED))


def _hash_of(pod: Json) -> str | None:
    digest = ((pod.get("metadata") or {}).get("annotations") or {}).get(TRUST_ROOT_ANNOTATION)
    return str(digest) if digest else None


def holding_bundle(
    candidates: Iterable[str | None], needed: frozenset[str], where: str
) -> str | None:
    """The first of ``candidates`` (the bundle in the ConfigMap, then the one this controller
    last wrote there) that holds every anchor in ``needed`` (those the mesh trusts now): the
    bundle a held removal keeps writing and rolling out, so the pods that hold it come onto
    a bundle that keeps both the old and the new anchors. None when neither does (then
    nothing is written)."""
    for text in candidates:
        if not text:
            continue
        try:
            bundle = parse_bundle(text, where)
        except BundleError:
            continue
        if needed <= bundle.fingerprints:
            return text
    return None


# -- one reconcile's question ------------------------------------------------------------------


@dataclass(frozen=True)
class Guard:
    """The guard's answer for one reconcile, and the status it leaves."""

    decision: Decision
    record: list[Json]
    """``status.trustBundles`` as it should be."""
    holding: str | None = None
    """While held: the bundle written and rolled out instead of the new one (the one the
    injector hands out now, or the one last written before a deletion), holding every
    anchor the mesh trusts; None when there is none (nothing is written)."""
    issuer_updated: float | None = None
    """When Linkerd's identity last took up a new issuer, as status keeps it (its Event
    expires within the hour; a removal may come a day later)."""
    recheck_after: float | None = None
    """While a removal waits for the issuer's update to age (``IssuerUpdate.until``):
    seconds until it no longer does, when nothing else wakes the reconcile."""

    @property
    def held(self) -> bool:
        return self.decision.held

    def status_changes(self, status: Json | None) -> Json:
        """What to merge into ``status`` (empty when nothing changes): the record, and the
        hold (None removes one that ended)."""
        stored = status or {}
        wanted: Json = {
            TRUST_BUNDLES_FIELD: self.record or None,
            TRUST_HOLD_FIELD: self.hold_status(),
            ISSUER_UPDATED_FIELD: None
            if self.issuer_updated is None
            else rfc3339(self.issuer_updated),
        }
        return {k: v for k, v in wanted.items() if stored.get(k) != v}

    def hold_status(self) -> Json | None:
        hold = self.decision.hold
        if hold is None:
            return None
        return {"dropped": [str(a) for a in self.decision.dropped], **hold.as_json()}


def issuer_event_time(event: Json) -> float | None:
    """When an ``IssuerUpdated`` Event last happened (client-go's recorder sets
    ``lastTimestamp``; the events.k8s.io API ``eventTime`` and its ``series``)."""
    series = event.get("series") or {}
    found = [unix_time(event.get(k)) for k in ("lastTimestamp", "eventTime", "firstTimestamp")] + [
        unix_time(series.get("lastObservedTime")) if isinstance(series, dict) else None
    ]
    return max((t for t in found if t is not None), default=None)


def issuer_updated(status: Json | None, seen: float | None) -> float | None:
    """The latest of the issuer update status keeps and the one ``seen`` now (the newest
    ``IssuerUpdated`` Event cached); an unreadable record counts as none."""
    kept = unix_time((status or {}).get(ISSUER_UPDATED_FIELD))
    found = [t for t in (kept, seen) if t is not None]
    return max(found) if found else None


def evaluate(
    desired: Desired,
    current: Mapping[str, Mapping[str, str]],
    status: Json | None,
    pods: Callable[[], Iterable[Keyed]],
    issuer_seen: float | None = None,
    now: float = 0.0,
) -> Guard:
    """The guard for writing ``desired`` over ``current`` (``desired.current_data``), with
    the record in the LinkerdConfig's ``status`` and the meshed pods (listed only when the
    bundle changes; ``pods`` raises MeshUnseen, passed on, while they cannot be seen). An
    unchanged bundle costs one comparison: nothing is parsed or listed. ``issuer_seen``: the
    newest issuer update the Events show (kept in status from then); a removal waits for the
    pods created before the latest one until their certificates have aged out
    (``decide``), at wall time ``now``.
    BundleError names a bundle that cannot be read when it matters: where the guard applies
    and the bundle changes (what is dropped cannot be told). Where the guard does not apply,
    an unreadable bundle is left to the format's own checks."""
    change = bundle_change(desired, current)
    record = list((status or {}).get(TRUST_BUNDLES_FIELD) or [])
    where = _where(change)
    updated = issuer_updated(status, issuer_seen)
    if not change.guarded:
        return Guard(_unguarded(change), record, issuer_updated=updated)
    if change.desired is None:
        return Guard(Decision(where=where), record, issuer_updated=updated)
    text = change.current if change.current is not None else change.written
    if not change.stated and change.written is not None:
        # A bundle the spec leaves to the cluster: its new text is what is desired, and the
        # copy kept of it is what the injector handed out before (someone else's removal).
        text = change.written
    settled = change.written in (None, text) and (status or {}).get(TRUST_HOLD_FIELD) is None
    if text == change.desired and settled:
        # What we wrote is what the injector hands out, and nothing was held: no pod can
        # run a bundle lacking its anchors because of us. Nothing parsed, nothing listed.
        return Guard(Decision(where=where), record, issuer_updated=updated)
    then = parse_bundle(change.desired, change.desired_where)
    known = known_bundles(status)
    meshed = list(pods())
    # Neither the ConfigMap nor a copy of what we wrote: the mesh's anchors are those its
    # pods run (an empty bundle of no hash, their anchors added by ``decide``).
    installed = Bundle("", ()) if text is None else parse_bundle(text, where)
    update = None
    if updated is not None:
        lifetime = issuance_lifetime(desired.data, str(desired.target))
        update = IssuerUpdate(updated, lifetime or DEFAULT_ISSUANCE_LIFETIME)
    decision = decide(
        installed, then, known, meshed, where=where, linkerd_version=change.linkerd_version,
        issuer=update, now=now,
    )  # fmt: skip
    seen = (installed,) if installed.anchors else ()
    if not decision.held:
        return Guard(decision, recorded(status, *seen, then), issuer_updated=updated)
    recheck = None
    if decision.hold is not None and decision.hold.issuer is not None:
        recheck = max(decision.hold.issuer.update.until - now, 1.0)
    mesh = in_use(installed, {**known, then.sha256: then.fingerprints}, meshed).fingerprints
    candidates: tuple[str | None, ...] = (change.current, change.written)
    if decision.swap:
        # A rotation's first step: every anchor in use, then the new ones (the Helm chart's
        # and Linkerd's docs' order), the holders restarted onto it.
        mesh |= then.fingerprints
        candidates = (*candidates, joined(text, change.desired))
    holding = holding_bundle(candidates, mesh, where)
    kept = recorded(status, *seen, *_parsed(holding, where))
    return Guard(decision, kept, holding, issuer_updated=updated, recheck_after=recheck)


def joined(first: str | None, second: str) -> str:
    """Two PEM bundles as one: ``first``'s certificates, then ``second``'s."""
    if not first:
        return second
    return f"{first.rstrip()}\n{second.lstrip()}"


def _parsed(text: str | None, where: str) -> tuple[Bundle, ...]:
    """``text`` as a recorded bundle (a rotation's first step, so pods restarted onto it are
    known), or nothing."""
    if text is None:
        return ()
    try:
        return (parse_bundle(text, where),)
    except BundleError:
        return ()


def holding_config(config: Json, bundle: str) -> Json:
    """``config`` with its spec's trust bundle replaced by ``bundle`` (a held removal's
    ``Guard.holding``): what the controller writes and rolls out while the removal waits."""
    spec = copy.deepcopy(config.get("spec") or {})
    identity = spec.setdefault("global", {}).setdefault("identityContext", {})
    identity["trustAnchorsPEM"] = bundle
    return {**config, "spec": spec}


def _where(change: BundleChange) -> str:
    return f"ConfigMap {change.where}, key {change.key}"


def _unguarded(change: BundleChange) -> Decision:
    """A drop where pods carry no hash: said, not held; but a swap (no anchor kept) held,
    with what to apply instead: which pods trust what cannot be seen there, and every pod
    would lose its common anchor with those restarted. An unreadable side says nothing."""
    if change.current is None or change.desired is None or change.current == change.desired:
        return Decision(guarded=False, where=_where(change), linkerd_version=change.linkerd_version)
    try:
        now = parse_bundle(change.current, _where(change))
        then = parse_bundle(change.desired, change.desired_where)
    except BundleError:
        return Decision(guarded=False, where=_where(change), linkerd_version=change.linkerd_version)
    dropped = tuple(a for a in now.anchors if a.sha256 not in then.fingerprints)
    swap = bool(dropped) and not now.fingerprints & then.fingerprints
    return Decision(
        dropped,
        Hold(then.anchors, (), 0, 0) if swap else None,
        guarded=False,
        where=_where(change),
        linkerd_version=change.linkerd_version,
        swap=swap,
    )


# -- the meshed pods' cache --------------------------------------------------------------------

MESHED_RECORDS: Final = 1024
"""Shared records of meshed pods at most (one per trust-root hash and minute of creation)."""
_RECORDS: SharedRecords[tuple[str, str], Json] = SharedRecords(MESHED_RECORDS, recent=True)
CREATED: Final = "creationTimestamp"


@reads(("metadata", "annotations", TRUST_ROOT_ANNOTATION), ("metadata", CREATED))
def meshed_pod_projection(pod: Json) -> Json:
    """A meshed pod as the guard reads it: its trust-root hash, and the minute it was created
    (rounded down: a pod is never taken for newer than it is), nothing else. Its name and
    namespace are its key (the informer keys what it lists and watches as served), so every
    pod of the same hash and minute shares one record, never mutated: at 50,000 pods a few
    records, and a key each. No resourceVersion either: an update that changes neither is no
    change."""
    metadata = pod.get("metadata") or {}
    digest = (metadata.get("annotations") or {}).get(TRUST_ROOT_ANNOTATION)
    digest = digest if isinstance(digest, str) else ""
    created = metadata.get(CREATED)
    minute = f"{created[:16]}:00Z" if isinstance(created, str) and len(created) >= 16 else ""

    def make() -> Json:
        meta: Json = {"annotations": {TRUST_ROOT_ANNOTATION: sys.intern(digest)} if digest else {}}
        if minute:
            meta[CREATED] = sys.intern(minute)
        return {"metadata": meta}

    record: Json = _RECORDS.get((digest, minute), make)
    return record


def meshed_selector(linkerd_namespace: str) -> str:
    """The label selector of the pods Linkerd's control plane in ``linkerd_namespace`` meshes."""
    return f"{MESHED_LABEL}={linkerd_namespace}"
