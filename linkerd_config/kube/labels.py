"""Kubernetes label selectors in their string form (``kubectl get -l``, ``labelSelector=``):
parsed once, matched against an object's labels, as the API server does.

The grammar is apimachinery's ``labels.Parse``: requirements joined by commas, each one of
``key``, ``!key``, ``key=value`` (or ``==``), ``key!=value``, ``key in (a,b)``,
``key notin (a,b)``. The empty selector selects everything. ``!=`` and ``notin`` select
objects without the key as well; ``=`` and ``in`` need it. The numeric ``gt``/``lt``
operators (node affinity only) are refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = rf"(?:{_DNS_LABEL}(?:\.{_DNS_LABEL})*/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$", re.DOTALL)
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*(\S*)$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "in", "notin", "exists", "!"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """``IN``, ``NOT_IN``, ``EXISTS`` or ``DOES_NOT_EXIST``."""
    values: tuple[str, ...] = ()
    """Sorted, for ``IN`` and ``NOT_IN``."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == EXISTS:
            return self.key in labels
        if self.operator == DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator == IN:
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return f"!{self.key}"
        return f"{self.key} {self.operator} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """Every requirement must hold; none selects everything. Hashable (a cache key)."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def everything(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """The selector ``text`` says; ValueError naming the part it cannot read."""
        return cls(tuple(_requirement(part) for part in _parts(text)))


EVERYTHING = LabelSelector()


def _parts(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses; blank text has no parts."""
    if not text.strip():
        return []
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced parenthesis in {text!r}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"unbalanced parenthesis in {text!r}")
    parts.append(current)
    return [p.strip() for p in parts]


def _values(raw: list[str], part: str) -> tuple[str, ...]:
    for value in raw:
        if not _VALUE_RE.match(value) or len(value) > 63:
            raise ValueError(
                f"{value!r} in {part!r} is not a label value (at most 63 letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit)"
            )
    return tuple(sorted(set(raw)))


def _requirement(part: str) -> Requirement:
    if not part:
        raise ValueError("an empty requirement (two commas, or one at an end)")
    found = _SET.match(part)
    if found:
        key, operator, inside = found.groups()
        raw = [v.strip() for v in inside.split(",")]
        if raw == [""]:
            raise ValueError(f"{part!r}: {operator} needs at least one value")
        return Requirement(key, operator, _values(raw, part))
    found = _EQUALITY.match(part)
    if found:
        key, operator, value = found.groups()
        return Requirement(key, NOT_IN if operator == "!=" else IN, _values([value], part))
    found = _EXISTS.match(part)
    if found:
        negated, key = found.groups()
        return Requirement(key, DOES_NOT_EXIST if negated else EXISTS)
    raise ValueError(
        f"cannot read {part!r}: expected key, !key, key=value, key!=value, key in (a,b) or "
        "key notin (a,b), with key a label name ([prefix/]name)"
    )
