"""Which Linkerd release, which format: ``target_release``'s rule as one table of cases.

A row: the spec's two version fields, what the cluster's linkerd-config declares (or
ADMISSION: no cluster, the guess), and the outcome: the release, the field or key it came
from, its format and what ``defaulted`` makes of ``spec.global.version``; or the one error,
its field and a fragment of its message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.admission.validation import validate
from linkerd_config.linkerd.formats import FormatError, Installed, guess, release_for
from linkerd_config.linkerd.formats.target_release import GLOBAL_VERSION, PROXY_VERSION

WHERE = "linkerd/linkerd-config"
VALUES_KEY = f"ConfigMap {WHERE}, key values"
GLOBAL_KEY = f"ConfigMap {WHERE}, key global"
STANDS_IN = "(the Linkerd version when spec.global.version is not set)"
NOT_A_VERSION = "is not a Linkerd version"
MISMATCH = "upgrade Linkerd first"

ADMISSION = "admission"
UNSET = object()


@dataclass(frozen=True)
class Cluster:
    """What the installed linkerd-config declares: in ``key`` (``values``, ``global``, or
    none: an empty ConfigMap), the version (None: the key declares none)."""

    key: str | None
    version: str | None = None

    def installed(self) -> Installed:
        data: dict[str, str] = {}
        if self.key == "values":
            data["values"] = f"linkerdVersion: {self.version}\n" if self.version else "x: 1\n"
        elif self.key == "global":
            data["global"] = json.dumps({"version": self.version} if self.version else {})
        return Installed(WHERE, data, {"linkerd-config": data})


@dataclass(frozen=True)
class Chosen:
    version: str
    source: str
    format: str
    global_version: str | None
    """``spec.global.version`` after ``defaulted`` in that format (None: left out)."""


@dataclass(frozen=True)
class Refused:
    field: str
    fragment: str


NOTHING = Cluster(None)
VALUES = Cluster("values", "edge-26.8.3")
LEGACY = Cluster("global", "edge-19.12.1")
UNREADABLE = Cluster("values", "edge-1.0.0")

ROWS: list[tuple[str, Any, Any, Cluster | str, Chosen | Refused | None]] = [
    # -- admission: the spec alone --------------------------------------------------------
    ("legacy-stated", "edge-19.12.3", "edge-19.12.3", ADMISSION,
     Chosen("edge-19.12.3", GLOBAL_VERSION, "legacy", "edge-19.12.3")),
    ("values-stated", "edge-26.8.3", "edge-26.8.4", ADMISSION,
     Chosen("edge-26.8.3", GLOBAL_VERSION, "values", "edge-26.8.3")),
    ("edge-20.10.1-is-legacy", "edge-20.10.1", "edge-20.10.1", ADMISSION,
     Chosen("edge-20.10.1", GLOBAL_VERSION, "legacy", "edge-20.10.1")),
    ("edge-20.10.2-is-values", "edge-20.10.2", "edge-20.10.2", ADMISSION,
     Chosen("edge-20.10.2", GLOBAL_VERSION, "values", "edge-20.10.2")),
    ("stable-2.8.4-is-legacy", "stable-2.8.4", "stable-2.8.4", ADMISSION,
     Chosen("stable-2.8.4", GLOBAL_VERSION, "legacy", "stable-2.8.4")),
    ("stable-2.9.0-is-values", "stable-2.9.0", "stable-2.9.0", ADMISSION,
     Chosen("stable-2.9.0", GLOBAL_VERSION, "values", "stable-2.9.0")),
    ("control-plane-and-proxy-differ", "edge-19.12.2", "git-0a1b2c3", ADMISSION,
     Chosen("edge-19.12.2", GLOBAL_VERSION, "legacy", "edge-19.12.2")),
    ("legacy-proxy-stands-in", UNSET, "edge-19.12.3", ADMISSION,
     Chosen("edge-19.12.3", PROXY_VERSION, "legacy", "edge-19.12.3")),
    ("empty-global-is-unset", "", "edge-20.10.1", ADMISSION,
     Chosen("edge-20.10.1", PROXY_VERSION, "legacy", "edge-20.10.1")),
    ("null-global-is-unset", None, "stable-2.8.4", ADMISSION,
     Chosen("stable-2.8.4", PROXY_VERSION, "legacy", "stable-2.8.4")),
    ("values-proxy-is-the-guess", UNSET, "edge-20.10.2", ADMISSION,
     Chosen("edge-20.10.2", PROXY_VERSION, "values", None)),
    ("stable-values-proxy-is-the-guess", UNSET, "stable-2.9.0", ADMISSION,
     Chosen("stable-2.9.0", PROXY_VERSION, "values", None)),
    ("no-version-at-all", UNSET, UNSET, ADMISSION, None),
    ("empty-versions", "", "", ADMISSION, None),
    ("garbage-global", "19.12.3", "edge-19.12.3", ADMISSION,
     Refused(GLOBAL_VERSION, NOT_A_VERSION)),
    ("month-13", "edge-19.13.1", "edge-19.12.3", ADMISSION,
     Refused(GLOBAL_VERSION, NOT_A_VERSION)),
    ("global-not-a-string", 19, "edge-19.12.3", ADMISSION,
     Refused(GLOBAL_VERSION, "must be a string")),
    ("global-before-the-legacy-format", "stable-2.5.0", "stable-2.5.0", ADMISSION,
     Refused(GLOBAL_VERSION, "not supported")),
    ("garbage-proxy-stands-in", UNSET, "git-0a1b2c3", ADMISSION,
     Refused(PROXY_VERSION, f"{STANDS_IN} 'git-0a1b2c3' {NOT_A_VERSION}")),
    ("old-proxy-stands-in", UNSET, "stable-2.5.0", ADMISSION,
     Refused(PROXY_VERSION, f"{STANDS_IN} Linkerd stable-2.5.0 is not supported")),
    # -- reconcile: the cluster's linkerd-config too ----------------------------------------
    ("values-proxy-follows-values-cluster", UNSET, "edge-26.8.4", VALUES,
     Chosen("edge-26.8.3", VALUES_KEY, "values", None)),
    ("values-proxy-follows-legacy-cluster", UNSET, "edge-26.8.4", LEGACY,
     Chosen("edge-19.12.1", GLOBAL_KEY, "legacy", "edge-19.12.1")),
    ("no-version-follows-cluster", None, UNSET, VALUES,
     Chosen("edge-26.8.3", VALUES_KEY, "values", None)),
    ("legacy-proxy-on-legacy-cluster", UNSET, "edge-19.12.3", LEGACY,
     Chosen("edge-19.12.3", PROXY_VERSION, "legacy", "edge-19.12.3")),
    ("stated-over-cluster-same-format", "edge-20.10.1", "edge-20.10.1", LEGACY,
     Chosen("edge-20.10.1", GLOBAL_VERSION, "legacy", "edge-20.10.1")),
    ("stated-values-on-values-cluster", "stable-2.9.0", "edge-26.8.4", VALUES,
     Chosen("stable-2.9.0", GLOBAL_VERSION, "values", "stable-2.9.0")),
    ("stated-newer-than-legacy-cluster", "edge-20.10.2", "edge-20.10.2",
     Cluster("global", "edge-20.10.1"), Refused(GLOBAL_VERSION, MISMATCH)),
    ("stable-2.9.0-on-stable-2.8.4", "stable-2.9.0", "stable-2.9.0",
     Cluster("global", "stable-2.8.4"), Refused(GLOBAL_VERSION, MISMATCH)),
    ("stated-older-than-values-cluster", "edge-19.12.3", "edge-19.12.3", VALUES,
     Refused(GLOBAL_VERSION, "the cluster runs Linkerd edge-26.8.3")),
    ("legacy-proxy-on-values-cluster", UNSET, "edge-20.10.1", VALUES,
     Refused(PROXY_VERSION, f"{STANDS_IN} edge-20.10.1 reads the legacy")),
    ("garbage-proxy-on-values-cluster", UNSET, "git-0a1b2c3", VALUES,
     Refused(PROXY_VERSION, NOT_A_VERSION)),
    ("garbage-global-on-values-cluster", "latest", "edge-26.8.4", VALUES,
     Refused(GLOBAL_VERSION, NOT_A_VERSION)),
    ("unreadable-cluster-version", UNSET, "edge-26.8.4", UNREADABLE,
     Refused(VALUES_KEY, "declares the Linkerd version, and 'edge-1.0.0' is not a Linkerd")),
    ("unsupported-cluster-version", UNSET, UNSET, Cluster("global", "stable-2.5.0"),
     Refused(GLOBAL_KEY, "state spec.global.version, or correct the ConfigMap")),
    ("stated-over-unreadable-cluster", "edge-26.8.3", "edge-26.8.4", UNREADABLE,
     Chosen("edge-26.8.3", GLOBAL_VERSION, "values", "edge-26.8.3")),
    ("nothing-installed", UNSET, "edge-26.8.4", NOTHING,
     Refused(GLOBAL_VERSION, "declares no version (no values key, nor a global with one)")),
    ("values-without-a-version", UNSET, "edge-26.8.4", Cluster("values"),
     Refused(GLOBAL_VERSION, "declares no version (its values key has no linkerdVersion")),
    ("legacy-without-a-version", "", UNSET, Cluster("global"),
     Refused(GLOBAL_VERSION, "declares no version (its global key has no version)")),
    ("stated-on-nothing-installed", "edge-19.12.3", "edge-19.12.3", NOTHING,
     Chosen("edge-19.12.3", GLOBAL_VERSION, "legacy", "edge-19.12.3")),
]  # fmt: skip


def spec_of(global_version: Any, proxy_version: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"global": {}, "proxy": {}}
    if global_version is not UNSET:
        spec["global"]["version"] = global_version
    if proxy_version is not UNSET:
        spec["proxy"]["proxyVersion"] = proxy_version
    return spec


def outcome(spec: dict[str, Any], cluster: Cluster | str) -> Chosen | Refused | None:
    try:
        if isinstance(cluster, Cluster):
            release = release_for(spec, cluster.installed())
            version, source, fmt = release.version, release.source, release.format
        else:
            guessed = guess(spec)
            if guessed is None:
                return None
            version, source, fmt = str(guessed.value), guessed.field, guessed.format()
    except FormatError as error:
        assert len(error.errors) == 1, error.errors
        return Refused(error.errors[0].field, error.errors[0].message)
    return Chosen(version, source, fmt.name, defaulted(spec, fmt)["global"].get("version"))


@pytest.mark.parametrize(
    ("global_version", "proxy_version", "cluster", "expected"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_the_target_release(
    global_version: Any,
    proxy_version: Any,
    cluster: Cluster | str,
    expected: Chosen | Refused | None,
) -> None:
    spec = spec_of(global_version, proxy_version)
    found = outcome(spec, cluster)
    if isinstance(expected, Refused):
        assert isinstance(found, Refused), found
        assert found.field == expected.field, found
        assert expected.fragment in found.fragment, found
    else:
        assert found == expected
    if cluster == ADMISSION:  # admission (after the mutating webhook) agrees on the field
        stored = {"metadata": {"name": "x"}, "spec": defaulted(spec)}
        fields = {error.field for error in validate(stored)}
        versions = {GLOBAL_VERSION, PROXY_VERSION} & fields
        if isinstance(expected, Refused):
            assert expected.field in versions
        elif expected is not None:
            assert not versions, fields
