"""``desired.desired_config`` remembers its last answers: a reconcile woken by its own
write's echo, a pod or a status write renders what it rendered before. Remembered or not, the
answer must be the rendering's, in both formats, for whatever changes between calls."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube.memo import Memo
from linkerd_config.linkerd.configmap import desired
from linkerd_config.linkerd.configmap.desired import Desired, desired_config
from linkerd_config.linkerd.formats import FormatError
from tests.support.linkerdconfigs import config as legacy_config
from tests.support.linkerdconfigs import small
from tests.support.samples import SECOND_TRUST_ANCHOR, install_configmap, modern_install

Json = dict[str, Any]
Current = dict[str, dict[str, str]]


def legacy() -> tuple[Json, Current]:
    return legacy_config(), {"linkerd-config": dict(install_configmap()["data"])}


def values() -> tuple[Json, Current]:
    return small(), {cm["metadata"]["name"]: dict(cm["data"]) for cm in modern_install()}


FORMATS = {"legacy": legacy, "values": values}


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> list[Json]:
    """The specs actually rendered (``desired._desired`` called), in order; the memory
    starts empty."""
    calls: list[Json] = []
    real = desired._desired

    def counting(config: Json, current: Any, snapshot: Any) -> Desired:
        calls.append(config["spec"])
        return real(config, current, snapshot)

    monkeypatch.setattr(desired, "_desired", counting)
    monkeypatch.setattr(desired, "_RENDERED", Memo(8))
    return calls


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_same_spec_on_the_same_data_is_rendered_once(rendered: list[Json], fmt: str) -> None:
    config, current = FORMATS[fmt]()
    first = desired_config(config, current)
    # What the rendering does not read may change: metadata, status.
    again = {**copy.deepcopy(config), "status": {"observedGeneration": 4}}
    again["metadata"]["resourceVersion"] = "77"
    assert desired_config(again, copy.deepcopy(current)) == first
    assert len(rendered) == 1


def _set_log_level(config: Json, current: Current) -> None:
    config["spec"]["proxy"]["logLevel"] = "warn,linkerd=info"


def _tamper_target(config: Json, current: Current) -> None:
    key = "proxy" if "proxy" in current["linkerd-config"] else "values"
    current["linkerd-config"][key] = current["linkerd-config"][key].replace("a", "b", 1)


def _anchor(config: Json, current: Current) -> None:
    config["spec"].setdefault("global", {}).setdefault("identityContext", {})
    config["spec"]["global"]["identityContext"]["trustAnchorsPEM"] = SECOND_TRUST_ANCHOR


def _another_configmap(config: Json, current: Current) -> None:
    current["linkerd-config-preserved"] = {"install": "{}"}


CHANGES: dict[str, Callable[[Json, Current], None]] = {
    "spec": _set_log_level,
    "installed data": _tamper_target,
    "trust anchor": _anchor,
    "another configmap": _another_configmap,
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("change", CHANGES)
def test_a_change_to_what_it_reads_renders_again(
    rendered: list[Json], fmt: str, change: str
) -> None:
    config, current = FORMATS[fmt]()
    desired_config(config, current)
    CHANGES[change](config, current)
    fresh = desired._desired(config, current, None)
    assert desired_config(config, current) == fresh
    assert len(rendered) == 3  # the first, the reference, and the changed one


def test_refusals_are_not_remembered(rendered: list[Json]) -> None:
    config, _ = legacy()
    del config["spec"]["global"]["identityContext"]["trustAnchorsPEM"]
    current: Current = {}  # no anchor in the spec, none installed to keep
    for _ in range(2):
        with pytest.raises(FormatError):
            desired_config(config, current)
    assert len(rendered) == 2


def test_at_most_a_few_answers_are_kept(rendered: list[Json]) -> None:
    config, current = values()
    for n in range(3 * desired._RENDERED.kept):
        config["spec"]["proxy"]["logLevel"] = f"warn,linkerd=debug,n{n}=info"
        desired_config(config, current)
    assert len(desired._RENDERED) == desired._RENDERED.kept


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(FORMATS)), st.sets(st.sampled_from(sorted(CHANGES)))),
        min_size=1,
        max_size=12,
    )
)
def test_remembered_or_not_the_answer_is_the_rendering(steps: list[tuple[str, set[str]]]) -> None:
    for fmt, changes in steps:
        config, current = FORMATS[fmt]()
        for change in sorted(changes):
            CHANGES[change](config, current)
        try:
            fresh = desired._desired(config, current, None)
        except FormatError:
            continue
        assert desired_config(config, current) == fresh


def test_the_legacy_render_of_an_unchanged_spec_reads_nothing_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A manual edit of a legacy ConfigMap changes what is installed, not the spec: the
    revert renders nothing again (``LegacyFormat.render`` is the spec's and the release's)."""
    from linkerd_config.linkerd.formats.legacy import format as legacy_format  # noqa: PLC0415

    monkeypatch.setattr(desired, "_RENDERED", Memo(8))
    monkeypatch.setattr(legacy_format, "_RENDERED", Memo(8))
    built: list[int] = []
    real = legacy_format.LegacyFormat.messages

    def counting(self: Any, spec: Any) -> Any:
        built.append(1)
        return real(self, spec)

    monkeypatch.setattr(legacy_format.LegacyFormat, "messages", counting)
    config, current = legacy()
    first = desired_config(config, current)
    _tamper_target(config, current)
    assert desired_config(config, current) == first
    assert len(built) == 1
    first.data["proxy"] = "changed by a caller"  # a caller's copy: never the remembered one
    assert desired_config(config, current).data["proxy"] != "changed by a caller"
