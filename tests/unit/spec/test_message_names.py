"""Every message that names a LinkerdConfig's fields names them as the object's writer does
(issue 39, finding 6): a v1alpha1 object's in v1alpha1's names (what v1alpha1 has no field
for, in its annotation), a v1alpha2 object's in v1alpha2's, wherever it is said: the Ready
condition and the Event (the controller), ``status`` (both read the stored object, whose
``managedFields`` say which version its spec was written in), ``plan -f`` (the file's
version) and the admission webhook's denial (the request's version).

A table: each case is a LinkerdConfig refused for one field, read in each version."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.admission.validation import render_errors, validate
from linkerd_config.linkerd.spec.conversion import (
    GROUP,
    STORAGE_VERSION,
    V1ALPHA1,
    V1ALPHA2,
    convert,
    said_to_writer,
    to_hub,
    written_version,
)
from linkerd_config.linkerd.status.plan import plan, status
from tests.support.controller_fakes import controller
from tests.support.linkerdconfigs import config, small
from tests.support.preview_views import DEFAULTS, view
from tests.support.samples import SAMPLES, install_configmap, load, modern_install

ANNOTATED = "metadata.annotations[config.linkerd.io/v1alpha2-values]"


def written_as(obj: Json, version: str | None) -> Json:
    """``obj`` (the hub, as the controller caches it) as stored after a user wrote its spec in
    ``version`` (None: no managedFields, as an API server that records none); the
    controller's own status write, newer and in v1alpha2, is there too."""
    stored = copy.deepcopy(obj)
    entries = [
        {
            "manager": "linkerd-config",
            "operation": "Update",
            "apiVersion": f"{GROUP}/{V1ALPHA2}",
            "time": "2026-01-02T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {}},
            "subresource": "status",
        }
    ]
    if version is not None:
        entries.insert(
            0,
            {
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": f"{GROUP}/{version}",
                "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {}, "f:spec": {}},
            },
        )
        stored["metadata"]["managedFields"] = entries
    return stored


def _invalid() -> Json:
    bad = load(SAMPLES / "invalid" / "bad_cluster_domain.yaml")
    bad["metadata"].update(creationTimestamp="2026-01-01T00:00:00Z", generation=1)
    return bad


def _no_version() -> Json:
    obj = small()
    obj["spec"]["global"] = {"configMap": "absent"}
    return obj


def _no_anchor() -> Json:
    obj = config(configMap="absent")
    del obj["spec"]["global"]["identityContext"]["trustAnchorsPEM"]
    return obj


def _values_only_on_legacy() -> Json:
    obj = config()
    obj["spec"]["values"] = {"disableIPv6": True}
    return obj


def _without_values() -> Json:
    configmap, _ = modern_install()
    return {**configmap, "data": {k: v for k, v in configmap["data"].items() if k != "values"}}


CASES: dict[str, tuple[Any, Json | None, str, str]] = {
    # case: (the object, linkerd-config, its field in v1alpha1, in v1alpha2)
    "invalid": (
        _invalid,
        install_configmap(),
        "spec.global.clusterDomain",
        "spec.values.clusterDomain",
    ),
    "no version": (_no_version, None, "spec.global.version", "spec.values.linkerdVersion"),
    "values deleted, no copy": (
        small,
        _without_values(),
        "spec.global.version",
        "spec.values.linkerdVersion",
    ),
    "no anchor": (
        _no_anchor,
        None,
        "spec.global.identityContext.trustAnchorsPEM",
        "spec.values.identityTrustAnchorsPEM",
    ),
    "values only": (
        _values_only_on_legacy,
        install_configmap(),
        f"{ANNOTATED}.disableIPv6",
        "spec.values.disableIPv6",
    ),
}
WRITERS = {V1ALPHA1: 0, V1ALPHA2: 1, None: 1}
"""Who wrote the stored object -> which of the case's names it reads (None: nothing says:
the storage version's, what ``kubectl get`` shows)."""


def names(case: str, version: str | None) -> tuple[str, str]:
    """The name ``version``'s reader must see, and the one it must not."""
    both = CASES[case][2:]
    return both[WRITERS[version]], both[1 - WRITERS[version]]


def said_right(text: str, right: str, wrong: str) -> bool:
    return f"{right}:" in text and wrong not in text


@pytest.mark.parametrize("version", list(WRITERS))
@pytest.mark.parametrize("case", list(CASES))
async def test_the_controller_names_fields_as_the_writer_does(case: str, version: str) -> None:
    make, configmap, *_ = CASES[case]
    right, wrong = names(case, version)
    stored = written_as(make(), version)
    ctl, writer, recorder = controller(stored, configmap=configmap)
    await ctl.reconcile(stored["metadata"]["name"])
    (said,) = writer.statuses
    ready = next(c for c in said["conditions"] if c["type"] == "Ready")
    assert said_right(ready["message"], right, wrong), ready
    assert recorder.events[-1] == ("Warning", "InvalidConfig"), recorder.events
    assert said_right(recorder.messages[-1], right, wrong), recorder.messages


@pytest.mark.parametrize("version", list(WRITERS))
@pytest.mark.parametrize("case", list(CASES))
def test_status_names_fields_as_the_writer_does(case: str, version: str) -> None:
    make, configmap, *_ = CASES[case]
    right, wrong = names(case, version)
    (found,) = status(
        view(configmap=configmap or {}, configs=[written_as(make(), version)]), DEFAULTS
    )
    assert found.problem is not None
    assert said_right(found.problem.message, right, wrong), found.problem


@pytest.mark.parametrize("version", [V1ALPHA1, V1ALPHA2])
@pytest.mark.parametrize("case", list(CASES))
def test_plan_names_fields_as_the_file_does(case: str, version: str) -> None:
    make, configmap, *_ = CASES[case]
    right, wrong = names(case, version)
    obj = make()
    obj["metadata"] = {"name": obj["metadata"]["name"]}  # as a file has it
    file = convert(convert(obj, V1ALPHA2), version)  # v1alpha1: its v1alpha2 values annotated
    found = plan(file, view(configmap=configmap or {}), DEFAULTS)
    assert found.problem is not None
    assert said_right(found.problem.message, right, wrong), found.problem


@pytest.mark.parametrize("version", [V1ALPHA1, V1ALPHA2])
def test_a_webhook_denial_names_fields_as_the_request_does(version: str) -> None:
    right, wrong = names("invalid", version)
    obj = _invalid()
    message = render_errors(validate(convert(obj, version)))
    assert said_right(message, right, wrong), message


@pytest.mark.parametrize("version", list(WRITERS))
async def test_a_missing_trust_roots_configmap_asks_for_the_anchor_as_the_writer_names_it(
    version: str,
) -> None:
    right, wrong = names("no anchor", version)
    config_cm, _ = modern_install()
    ctl, writer, recorder = controller(written_as(small(), version), configmap=config_cm)
    await ctl.reconcile("modern")
    ready = next(c for c in writer.statuses[-1]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ConfigMapMissing"
    assert f"state {right};" in ready["message"] and wrong not in ready["message"], ready
    assert f"state {right};" in recorder.messages[-1]


def test_without_a_copy_the_missing_version_says_what_to_do() -> None:
    """The ConfigMap lost its ``values`` before the controller ever kept a copy: nothing says
    which release it is, so the spec may say, or the ConfigMap be restored."""
    (found,) = status(
        view(configmap=_without_values(), configs=[written_as(small(), V1ALPHA1)]), DEFAULTS
    )
    assert found.problem is not None
    assert found.problem.message.startswith("spec.global.version: is not set"), found.problem
    assert "linkerd/linkerd-config" in found.problem.message, found.problem
    assert "linkerd upgrade" in found.problem.message, found.problem


def _entry(version: str, time: str, fields: Json, **more: str) -> Json:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **more,
    }


SPEC, META = {"f:spec": {"f:proxy": {}}}, {"f:metadata": {"f:annotations": {}}}


@pytest.mark.parametrize(
    ("entries", "version"),
    [
        (None, STORAGE_VERSION),
        ([], STORAGE_VERSION),
        ([_entry(V1ALPHA1, "2026-01-01T00:00:00Z", SPEC)], V1ALPHA1),
        # The status subresource and a write of metadata alone are not the spec's.
        (
            [
                _entry(V1ALPHA1, "2026-01-01T00:00:00Z", SPEC),
                _entry(V1ALPHA2, "2026-01-03T00:00:00Z", {"f:status": {}}, subresource="status"),
                _entry(V1ALPHA2, "2026-01-02T00:00:00Z", META),
            ],
            V1ALPHA1,
        ),
        # The newest write of the spec decides; a tie, the later entry.
        (
            [
                _entry(V1ALPHA2, "2026-01-02T00:00:00Z", SPEC),
                _entry(V1ALPHA1, "2026-01-01T00:00:00Z", SPEC),
            ],
            V1ALPHA2,
        ),
        (
            [
                _entry(V1ALPHA2, "2026-01-01T00:00:00Z", SPEC),
                _entry(V1ALPHA1, "2026-01-01T00:00:00Z", SPEC),
            ],
            V1ALPHA1,
        ),
        # Another group, a version not served, junk: nothing says.
        ([{**_entry(V1ALPHA1, "2026", SPEC), "apiVersion": "v1"}], STORAGE_VERSION),
        ([_entry("v1beta9", "2026", SPEC)], STORAGE_VERSION),
        (["junk", {"fieldsV1": "junk"}, 7], STORAGE_VERSION),
        ("junk", STORAGE_VERSION),
    ],
)
def test_written_version(entries: Any, version: str) -> None:
    obj: Json = {"metadata": {"name": "x"}}
    if entries is not None:
        obj["metadata"]["managedFields"] = entries
    assert written_version(obj) == version


def test_said_to_writer_is_idempotent_and_leaves_other_text_alone() -> None:
    for version in (V1ALPHA1, V1ALPHA2):
        obj = written_as(to_hub(config()), version)
        for text in ("spec.global.version: x", "spec.values.disableIPv6: y", "no field", ""):
            once = said_to_writer(text, obj)
            assert said_to_writer(once, obj) == once
    assert said_to_writer(
        "ConfigMap linkerd/x, key values: bad", written_as(config(), V1ALPHA2)
    ) == ("ConfigMap linkerd/x, key values: bad")


@pytest.mark.parametrize(
    ("version", "field"),
    [
        (V1ALPHA1, "spec.global.identityContext.trustAnchorsPEM"),
        (V1ALPHA2, "spec.values.identityTrustAnchorsPEM"),
    ],
)
def test_plans_warnings_name_fields_as_the_file_does(version: str, field: str) -> None:
    """As the webhook warns a request: a v1alpha2 file was warned in the hub's names."""
    obj = small()
    obj["metadata"] = {"name": "modern"}
    configmap, _ = modern_install()
    found = plan(convert(obj, version), view(configmap=configmap), DEFAULTS)
    assert found.problem is None, found.problem
    assert [w for w in found.warnings if w.startswith(f"{field} is not set")], found.warnings
