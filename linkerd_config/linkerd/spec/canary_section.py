"""``spec.rollout.canary``, the section a user writes: its bounds, what is wrong with one
(``problems``, for validation), and how the controller reads an admitted one (``CanarySpec``).
The canary's state and its decisions are the rollout's (``canary``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from linkerd_config.kube.labels import EVERYTHING, LabelSelector
from linkerd_config.linkerd.formats.field_grammar import parse_go_duration
from linkerd_config.linkerd.mesh import NAMESPACE_NAME_LABEL, Workload

DEFAULT_STABLE_FOR: Final = 300.0
"""Seconds (5m) a canary must stay healthy when ``stableFor`` is not set."""


MAX_COUNT: Final = 1000


MAX_STABLE_FOR: Final = 7 * 24 * 3600.0
"""``stableFor`` at most 168h: longer is a rollout nobody is waiting for."""


MAX_SELECTOR_CHARS: Final = 1024


Labels = tuple[Mapping[str, str], Mapping[str, str]]
"""A workload's own labels, and its namespace's."""


@dataclass(frozen=True)
class CanarySpec:
    """``spec.rollout.canary`` as the controller reads it (validated: see ``problems``)."""

    count: int = 1
    namespace_selector: LabelSelector = EVERYTHING
    selector: LabelSelector = EVERYTHING
    stable_for: float = DEFAULT_STABLE_FOR

    @classmethod
    def of(cls, section: Any) -> CanarySpec | None:
        """From an admitted ``spec.rollout.canary`` (None: no canary)."""
        if not isinstance(section, Mapping):
            return None
        stable_for = section.get("stableFor")
        return cls(
            count=int(section.get("count", 1)),
            namespace_selector=LabelSelector.parse(str(section.get("namespaceSelector", ""))),
            selector=LabelSelector.parse(str(section.get("selector", ""))),
            stable_for=DEFAULT_STABLE_FOR
            if stable_for is None
            else parse_go_duration(stable_for) / 1e9,
        )

    def selects(self, workload: Workload, labels: Labels | None) -> bool:
        """Whether ``workload`` (its labels and its namespace's; None: unknown) may be one."""
        if workload.kind == "Pod" or labels is None:
            return False
        own, namespace = labels
        return self.selector.matches(own) and self.namespace_selector.matches(
            {**namespace, NAMESPACE_NAME_LABEL: workload.namespace}
        )

    def described(self) -> str:
        """Its selectors, for people."""
        said = [
            f"{what} '{selector}'"
            for what, selector in (
                ("namespaceSelector", self.namespace_selector),
                ("selector", self.selector),
            )
            if not selector.everything
        ]
        return " and ".join(said) or "no selector (any workload)"


def problems(section: Any) -> list[tuple[str, str]]:
    """What is wrong with ``spec.rollout.canary`` (``(field, message)``; durations and string
    bounds are validation's own checks): the count, the selectors' grammar."""
    if section is None:
        return []
    where = "spec.rollout.canary"
    if not isinstance(section, Mapping):
        return [(where, "must be an object")]
    found: list[tuple[str, str]] = []
    count = section.get("count")
    if count is not None and (
        isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT
    ):
        found.append((f"{where}.count", f"{count!r} must be a whole number from 1 to {MAX_COUNT}"))
    for key in ("namespaceSelector", "selector"):
        text = section.get(key)
        if text is None:
            continue
        if not isinstance(text, str):
            found.append((f"{where}.{key}", "must be a label selector string, e.g. app=web"))
            continue
        try:
            LabelSelector.parse(text)
        except ValueError as exc:
            found.append((f"{where}.{key}", str(exc)))
    stable_for = section.get("stableFor")
    if isinstance(stable_for, str):
        try:
            seconds = parse_go_duration(stable_for) / 1e9
        except ValueError:
            seconds = 0.0  # validation's duration check says why
        if seconds > MAX_STABLE_FOR:
            found.append((f"{where}.stableFor", f"{stable_for!r} is longer than 168h"))
    return found
