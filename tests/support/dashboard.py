"""Reading manifests/grafana/linkerd-config.json the way Grafana does, for the tests that check
it: its panels and targets, its template variables, Grafana's variable substitution, and the
series names a PromQL expression selects."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "manifests" / "grafana" / "linkerd-config.json"
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}

Json = dict[str, Any]


def load(path: Path = DASHBOARD) -> Json:
    dashboard: Json = json.loads(path.read_text())
    return dashboard


def panels(dashboard: Json) -> list[Json]:
    """Every panel, those inside collapsed rows too; rows themselves included."""
    found: list[Json] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels") or [])
    return found


def targets(dashboard: Json) -> Iterator[tuple[Json, Json]]:
    """(panel, target) for every query of every panel."""
    for panel in panels(dashboard):
        for target in panel.get("targets") or []:
            yield panel, target


def variables(dashboard: Json) -> dict[str, Json]:
    """The template variables by name, in the order Grafana resolves them."""
    return {v["name"]: v for v in dashboard["templating"]["list"]}


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\s*\)$", re.DOTALL)


def label_values_query(definition: str) -> tuple[str, str]:
    """``label_values(selector, label)``, Grafana's Prometheus variable query, split."""
    match = _LABEL_VALUES.match(definition.strip())
    if match is None:
        raise ValueError(f"not a label_values(selector, label) query: {definition!r}")
    return match["selector"], match["label"]


def format_value(variable: Json, values: Sequence[str]) -> str:
    """A variable's value as Grafana's Prometheus data source writes it into a query: a
    multi-value or include-All variable as a regex alternation of its values, regex-escaped
    and then escaped for a PromQL string; a single value as it is."""
    if variable.get("multi") or variable.get("includeAll"):
        escaped = [re.escape(v).replace("\\", "\\\\") for v in values]
        return "(" + "|".join(escaped) + ")"
    return values[0]


_REFERENCE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``$name`` and ``${name}`` replaced; a name without a value is a KeyError, so a new
    variable cannot slip through unresolved."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return _REFERENCE.sub(value, expr)


# -- PromQL: the series names an expression selects -------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w.:$])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The series names in ``expr``: identifiers left once strings, label matchers, ranges and
    grouping clauses are gone, that are neither a function or aggregation (followed by ``(``)
    nor a keyword. Enough for the dashboard's queries (tests pin its answers)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names
