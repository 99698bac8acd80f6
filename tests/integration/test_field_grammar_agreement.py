"""Three verdicts on every field's grammar agree: the API server's (the CRD's OpenAPI schema and
CEL rules, with ``fieldValidation=Strict`` as ``kubectl apply`` asks), the validating
webhook's (``validation.validate`` behind the real admission handlers) and ``plan``'s
(``plan.plan`` over an installed ConfigMap).

Every leaf of ``spec.global``, ``spec.proxy`` and ``spec.rollout`` is found by walking
``spec_schema()`` (an array field and its items both), so a field added to the schema is
covered here without an edit. For each, hypothesis draws values from the schema node itself
(values of its pattern, near-misses of them, enum members and non-members, integers around the
bounds, wrong JSON types, over-long strings, control characters), beside a fixed list of
hostile values per type; each is set alone on a base spec whose target release has the field.

The mutating webhook runs before the schema and the validating webhook do, so each object is
first given the mutating handler's patch, as the API server would apply it; the API server is
then asked with no webhook registered (the schema alone). Hypothesis only draws (derandomized,
so CI sees the same values every run): the requests are sent together, and every
disagreement is reported at once as a table.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from linkerd_config.kube.admission import AdmissionRequest
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import stored_json
from linkerd_config.linkerd.admission.webhooks import mutate, validator
from linkerd_config.linkerd.configmap import decision
from linkerd_config.linkerd.formats import field_table
from linkerd_config.linkerd.formats.field_table import by_path
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.conversion import GROUP, V1ALPHA1, V1ALPHA2, convert
from linkerd_config.linkerd.spec.crd import (
    KIND,
    LINKERD_CONFIGS,
    LINKERD_CONFIGS_V1ALPHA1,
    spec_schema,
)
from linkerd_config.linkerd.status.plan import plan
from linkerd_config.linkerd.status.view import ClusterView
from tests.support import scenario
from tests.support.samples import install_configmap, modern_install, sample

Json = dict[str, Any]
Path_ = tuple[str, ...]
SECTIONS = ("global", "proxy", "rollout")
MODERN = "edge-26.8.3"
ITEM = "[]"
"""The last element of an array's items' path: ``("proxy", "ignoreInboundPorts", "[]")``."""

SCHEMA_EXACT = frozenset(
    {
        *(row.field for row in field_table.FIELDS if row.grammar.exact),
        "spec.rollout.paused",
        "spec.rollout.maxRestartsPerPass",
        "spec.rollout.onFailure",
        "spec.rollout.canary.count",
    }
)
"""Fields whose only rules are type, pattern, enum and bounds: the schema says everything the
webhook checks, so the API server's verdict must equal the webhook's. For the configuration
fields the field table says which (``Grammar.exact``); the rollout section's are listed. The
others (trust anchors, networks, quantities, ignored port ranges, durations, which must be
positive, canary selectors) have checks the schema cannot express: there the webhook may
refuse more."""

DRAWN_PER_FIELD = 40
"""Hypothesis draws per field (besides the fixed hostile values)."""
REPORT = os.environ.get("FIELD_GRAMMAR_REPORT")
"""When set, the disagreements are written there as Markdown too."""

ROLLOUT_EXAMPLES: dict[str, Any] = {
    "spec.rollout.restartInterval": "30s",
    "spec.rollout.progressDeadline": "10m",
    "spec.rollout.canary.namespaceSelector": "env=staging",
    "spec.rollout.canary.selector": "app=web",
    "spec.rollout.canary.stableFor": "15m",
}
"""Valid values of fields the field table does not describe (and no type default fits)."""


# -- the fields ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    path: Path_
    """Under ``spec``; an array's items end in ``ITEM``."""
    node: Json
    version: str = V1ALPHA1
    """The version whose objects carry it: v1alpha1's fields are asked in v1alpha1, the
    fields only v1alpha2 has (``spec.values.*``, the same path in the hub) in v1alpha2."""

    @property
    def name(self) -> str:
        dotted = "spec." + ".".join(p for p in self.path if p != ITEM)
        return dotted + ITEM if self.path[-1] == ITEM else dotted

    @property
    def field(self) -> str:
        """The field the value is set on (an item's: its array)."""
        return "spec." + ".".join(p for p in self.path if p != ITEM)


def leaves(schema: Json, path: Path_ = (), version: str = V1ALPHA1) -> Iterator[Leaf]:
    # An array's object items (environment variables) are one value: asked whole.
    if schema.get("type") == "object" and "properties" in schema and path[-1:] != (ITEM,):
        for key, child in schema["properties"].items():
            yield from leaves(child, (*path, key), version)
        return
    yield Leaf(path, schema, version)
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        yield from leaves(schema["items"], (*path, ITEM), version)


VALUES_ONLY = {row.path for row in field_table.FIELDS if not row.in_v1alpha1}
LEAVES = [
    leaf
    for section in SECTIONS
    for leaf in leaves(spec_schema(V1ALPHA1)["properties"][section], (section,))
] + [
    leaf
    for leaf in leaves(spec_schema(V1ALPHA2)["properties"]["values"], ("values",), V1ALPHA2)
    if any(leaf.path[: len(row)] == row for row in VALUES_ONLY)
]


def kind_of(node: Json) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    return str(node.get("type"))


def get(spec: Json, path: Path_) -> Any:
    value: Any = spec
    for key in path:
        if key == ITEM:
            value = value[0] if isinstance(value, list) and value else None
        elif isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return value


def with_value(base: Json, leaf: Leaf, value: Any) -> Json:
    """``base`` (a whole LinkerdConfig) with ``leaf`` set to ``value`` (an item: the array
    holds it alone), under a fresh name."""
    obj = copy.deepcopy(base) if leaf.version == V1ALPHA1 else convert(base, leaf.version)
    obj["metadata"] = {"name": f"grammar-{uuid.uuid4().hex[:10]}"}
    path = leaf.path
    if path[-1] == ITEM:
        path, value = path[:-1], [value]
    parent = obj["spec"]
    for key in path[:-1]:
        parent = parent.setdefault(key, {})
    parent[path[-1]] = value
    return obj


# -- the base specs --------------------------------------------------------------------------


def _view(configmaps: list[Json]) -> ClusterView:
    return ClusterView(
        configs=[],
        configmaps={f"linkerd/{cm['metadata']['name']}": cm for cm in configmaps},
        pods=[],
        namespaces={},
        replicasets={},
        workloads={},
        config_namespace="linkerd",
    )


def _legacy(version: str | None) -> Json:
    obj = sample("edge_19.12.3.yaml")
    if version is not None:
        obj["spec"]["global"]["version"] = version
        obj["spec"]["proxy"]["proxyVersion"] = version
    return obj


@dataclass(frozen=True)
class Base:
    name: str
    obj: Json
    view: ClusterView


BASES = [
    Base(
        MODERN,
        {
            "apiVersion": f"{GROUP}/{V1ALPHA1}",
            "kind": KIND,
            "metadata": {"name": "base"},
            "spec": {"global": {"version": MODERN}, "proxy": {"proxyVersion": MODERN}},
        },
        _view(modern_install()),
    ),
    Base("edge-19.12.3", _legacy(None), _view([install_configmap()])),
    Base("edge-20.9.4", _legacy("edge-20.9.4"), _view([install_configmap()])),
    Base("edge-20.8.1", _legacy("edge-20.8.1"), _view([install_configmap()])),
]


def example(leaf: Leaf, base: Base) -> Any:
    """A schema-valid value of ``leaf`` for ``base``: its own when it has one."""
    found = get(base.obj["spec"], leaf.path)
    if found is not None:
        return found
    row = by_path().get(tuple(p for p in leaf.path if p != ITEM))
    if row is not None:
        value = row.grammar.example
        return value[0] if leaf.path[-1] == ITEM and isinstance(value, list) else value
    if leaf.name in ROLLOUT_EXAMPLES:
        return ROLLOUT_EXAMPLES[leaf.name]
    node = leaf.node
    if node.get("enum"):
        return node["enum"][0]
    kind = kind_of(node)
    if kind == "boolean":
        return True
    if kind == "integer":
        return node.get("minimum", 1)
    if kind == "array":
        return []
    return "a"


def base_for(leaf: Leaf) -> tuple[Base, Any]:
    """The first base whose release accepts an example of ``leaf``, and that example."""
    for base in BASES:
        value = example(leaf, base)
        if not webhook_verdict(with_value(base.obj, leaf, value))[0]:
            return base, value
    raise AssertionError(f"no base spec accepts {leaf.name} = {value!r}")


# -- the values --------------------------------------------------------------------------------

LOOKALIKES = {
    "\u00b5": "\u03bc",  # MICRO SIGN -> GREEK SMALL LETTER MU, and back
    "\u03bc": "\u00b5",
    "s": "\u017f",  # LATIN SMALL LETTER LONG S (case-folds to s)
    "k": "\u212a",  # KELVIN SIGN (case-folds to k)
    "i": "\u0131",  # LATIN SMALL LETTER DOTLESS I
    "a": "\u0430",  # CYRILLIC SMALL LETTER A
    "o": "\u043e",  # CYRILLIC SMALL LETTER O
    "e": "\u0435",  # CYRILLIC SMALL LETTER IE
    "-": "\u2010",  # HYPHEN
    ".": "\u2024",  # ONE DOT LEADER
}
FULLWIDTH = {ord("0") + d: 0xFF10 + d for d in range(10)}
"""Digits to FULLWIDTH DIGITs (str.translate)."""
CONTROLS = ["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9f", "\u2028", "\ufeff"]
WRONG_TYPES: list[Any] = [None, True, False, 0, 1, -1, 1.5, "", "x", [], ["x"], {}, {"a": 1}]


def mutations(text: str) -> list[str]:
    """Near-misses of a valid string."""
    found = [
        text + "\n",
        "\n" + text,
        " " + text,
        text + " ",
        "+" + text,
        "-" + text,
        text.upper(),
        text.lower(),
        text.translate(FULLWIDTH),
        text[1:],
        text[:-1],
        text + text[-1:],
        "\u00a0" + text,
        text + "\u200b",
    ]
    found += [text.replace(a, b, 1) for a, b in LOOKALIKES.items() if a in text]
    return found


@st.composite
def near_miss(draw: st.DrawFn, valid: st.SearchStrategy[str]) -> str:
    text = draw(valid)
    how = draw(st.integers(0, 3))
    at = draw(st.integers(0, len(text)))
    if how == 0 and text:  # a character deleted
        return text[: max(at - 1, 0)] + text[max(at, 1) :]
    if how == 1:  # a character inserted
        inserted = draw(st.sampled_from([" ", "+", "-", ".", "0", "A", "\n", "é", "_", "/", "="]))
        return text[:at] + inserted + text[at:]
    if how == 2:
        return draw(st.sampled_from(mutations(text) or [text]))
    return text + draw(st.sampled_from(CONTROLS))


def _core(pattern: str) -> str:
    return pattern.removeprefix("^").removesuffix("$")


def strategy(node: Json, valid_example: Any) -> st.SearchStrategy[Any]:
    """Values for a field of schema ``node``: valid, nearly valid, and wrong."""
    kind = kind_of(node)
    parts: list[st.SearchStrategy[Any]] = [st.sampled_from(WRONG_TYPES)]
    limit = node.get("maxLength")
    if kind in ("string", "int-or-string"):
        if node.get("enum"):
            members = st.sampled_from(node["enum"])
            parts += [members, near_miss(members), st.text(max_size=12)]
        if node.get("pattern"):
            valid = st.from_regex(_core(node["pattern"]), fullmatch=True)
            if limit:
                valid = valid.filter(lambda s: len(s) <= limit)
            parts += [valid, near_miss(valid)]
        if isinstance(valid_example, str):
            parts.append(near_miss(st.just(valid_example)))
        parts.append(st.text(max_size=20))
    if kind in ("integer", "int-or-string"):
        low, high = node.get("minimum"), node.get("maximum")
        for bound in (low, high):
            if bound is not None:
                parts.append(st.integers(bound - 3, bound + 3))
        parts.append(st.integers(-(2**63), 2**64 - 1))  # what JSON encoding (orjson) sends
    if kind == "boolean":
        parts.append(st.booleans())
    if kind == "array":
        items = node.get("items") or {}
        item = valid_example[0] if valid_example else "1"
        parts.append(st.lists(strategy(items, item), max_size=4))
    if kind == "object":
        scalars = st.one_of(
            st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none()
        )
        parts.append(st.dictionaries(st.text(max_size=8), scalars, max_size=4))
        if isinstance(valid_example, dict):
            parts.append(st.fixed_dictionaries({k: scalars for k in valid_example}))
    if kind == "number":
        parts.append(st.floats(allow_nan=False, allow_infinity=False))
        parts.append(st.floats(-0.5, 1.5))
    return st.one_of(parts)


def hostile(node: Json, valid_example: Any) -> list[Any]:
    """Fixed values every field of this kind must answer the same way to."""
    kind = kind_of(node)
    found: list[Any] = list(WRONG_TYPES)
    limit = node.get("maxLength")
    if isinstance(valid_example, str):
        found += mutations(valid_example)
        found += [valid_example + c for c in CONTROLS]
        if limit is not None:
            found.append((valid_example * (limit + 1))[: limit + 1])
            found.append((valid_example * (limit + 1))[:limit])
    if kind in ("string", "int-or-string"):
        found += ["0", "1", "null", "true", " ", "\n", "💥", "a" * 70000]
        found += [m for m in node.get("enum") or []]
        found += [m.lower() for m in node.get("enum") or []]
        if node.get("pattern") == spec_schema_duration_pattern():
            found += ["+1s", "1.s", ".5s", "0", "0s", "-1s", "1h-1m", "1s\n", "1", "1d", "1µs"]
            found += ["1μs", "1S", "1 s", "9223372036854775807ns", "9223372036854775808ns"]
            found += ["1e3s", "0x10s", "1_000s", "\uff11s", "1.5", "1h30m", "1.0000000001s"]
    if kind in ("integer", "int-or-string"):
        for bound in (node.get("minimum"), node.get("maximum")):
            if bound is not None:
                found += [bound - 1, bound, bound + 1, float(bound), str(bound)]
        found += [2**31, 2**63 - 1, 2**63, -(2**63), 80.0, 80.5, "80", "0x50", "1e3"]
    if kind == "int-or-string":
        found += ["+1", "-1", "1e3", "1E3", "1.5", ".5", "5.", "1Ki", "1ki", "1KI", "1m", "1M"]
        found += ["1 ", " 1", "1e", "1Mi ", "0.000000001", "1e1000", "9" * 30, "1.0e3"]
    if kind == "boolean":
        found += ["true", "false", "True", "yes", "on", 1, 0]
    if kind == "array":
        item = valid_example[0] if valid_example else "1"
        found += [item, [item, item], [item] * ((node.get("maxItems") or 8) + 1), [[item]]]
        found += [[None], [1], [{}], [item, 7]]
        if isinstance(item, str):
            found.append([" " + item])
        else:  # an object's items: a member missing, of a wrong type, or unknown
            found += [[{**item, "name": ""}], [{"value": "x"}], [{**item, "value": 1}]]
            found += [[{**item, "valueFrom": "x"}], [{**item, "extra": 1}], [item, item]]
            # names Kubernetes refuses in a container's env (issue 39, finding 3)
            found += [[{**item, "name": n}] for n in ("A\nB", "1A", "A=B", "\ufeffA", "{{ x }}")]
            found += [[{**item, "name": n}] for n in ("A.B-1", "_X", "\u2028")]
    if kind == "object":
        found += [{"a": "b"}, {"a": {"b": "c"}}, {"a": 1}, {"": ""}, {"a": "x" * 5000}]
    if kind == "number":
        found += [0, 0.0, 0.1, 1, 1.0, 1.5, -0.1, 2, "0.5", 1e300]
    return found


def spec_schema_duration_pattern() -> str:
    node = spec_schema(V1ALPHA1)["properties"]["rollout"]["properties"]["restartInterval"]
    return str(node["pattern"])


def drawn(strategy_: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` values of ``strategy_``, the same every run."""
    found: list[Any] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategy_)
    def collect(value: Any) -> None:
        found.append(value)

    collect()
    return found


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True) + type(value).__name__


def values_for(leaf: Leaf, valid_example: Any) -> list[Any]:
    seen: set[str] = set()
    found = []
    candidates = [valid_example, *hostile(leaf.node, valid_example)]
    candidates += drawn(strategy(leaf.node, valid_example), DRAWN_PER_FIELD)
    for value in candidates:
        if isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value):
            continue  # not JSON the API server would pass on unchanged
        key = _key(value)
        if key not in seen:
            seen.add(key)
            found.append(value)
    return found


# -- the three verdicts ------------------------------------------------------------------------

_NO_OTHERS = SimpleNamespace(configs=SimpleNamespace(store=SimpleNamespace(list=list)))
_VALIDATE = validator(_NO_OTHERS)
PLAN_REFUSALS = (decision.INVALID,)
"""Plan's refusal of the object itself. (``InvalidConfig`` is about the cluster: a ConfigMap
the spec names that is not installed, say; the API server knows nothing of it.)"""


def _review(obj: Json) -> AdmissionRequest:
    return AdmissionRequest(
        uid=uuid.uuid4().hex,
        operation="CREATE",
        kind={"group": GROUP, "version": obj["apiVersion"].rpartition("/")[2], "kind": KIND},
        namespace="",
        name=str(obj["metadata"]["name"]),
        object=obj,
        old_object=None,
        dry_run=True,
        user="tests",
        raw={},
    )


def _apply_patch(obj: Json, patch: list[Json]) -> Json:
    """The mutating webhook's JSONPatch (``add`` operations) applied, as the API server does."""
    result = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add", op
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        parent = result
        for key in keys[:-1]:
            parent = parent[key]
        parent[keys[-1]] = copy.deepcopy(op["value"])
    return result


def mutated(obj: Json) -> Json:
    response = mutate(_review(obj))
    assert response.allowed, response
    return _apply_patch(obj, response.patch or [])


def webhook_verdict(obj: Json) -> tuple[bool, str]:
    """(refused, message): the mutating then the validating handler, as admission runs them,
    on the JSON the API server sends them (no nulls; 80.0 as 80)."""
    response = _VALIDATE(_review(mutated(stored_json(obj))))
    assert not isinstance(response, asyncio.Future)
    return (not response.allowed, response.message)


def plan_verdict(obj: Json, base: Base) -> tuple[bool, str]:
    try:
        result = plan(copy.deepcopy(obj), base.view, RolloutOptions())
    except Exception as exc:  # a crash is a verdict of its own, reported
        return (True, f"plan raised {exc!r}")
    problem = result.problem
    if problem is None:
        return (False, "")
    return (problem.reason in PLAN_REFUSALS, f"{problem.reason}: {problem.message}")


async def apiserver_verdict(kube: KubeClient, obj: Json) -> tuple[bool, str]:
    """A server-side dry-run create of what the mutating webhook leaves, as ``kubectl apply``
    sends it (``fieldValidation=Strict``), against the CRD alone."""
    try:
        v2 = obj["apiVersion"].endswith(V1ALPHA2)
        await kube.request(
            "POST",
            (LINKERD_CONFIGS if v2 else LINKERD_CONFIGS_V1ALPHA1).path(),
            params={"dryRun": "All", "fieldValidation": "Strict"},
            body=mutated(obj),
            fenced=False,
        )
    except ApiError as exc:
        if exc.status >= 500 or exc.status == 409:
            raise
        return (True, exc.message)
    return (False, "")


@dataclass
class Case:
    leaf: Leaf
    base: str
    value: Any
    webhook: tuple[bool, str]
    plan: tuple[bool, str]
    apiserver: tuple[bool, str] = (False, "")

    def verdicts(self) -> str:
        return "/".join(
            "refuse" if v[0] else "accept" for v in (self.apiserver, self.webhook, self.plan)
        )

    def messages(self) -> str:
        text = " / ".join(
            f"{who}: {v[1][:200]}"
            for who, v in (("api", self.apiserver), ("webhook", self.webhook), ("plan", self.plan))
            if v[1]
        )
        return text.replace("|", "/").replace("\n", " ")


TABLE_HEAD = (
    "| field | base | values | apiserver | webhook | plan | messages (the first value's) |\n"
    "|---|---|---|---|---|---|---|"
)


@dataclass
class Findings:
    api_only: list[Case] = field(default_factory=list)
    """(i) the API server refuses, the webhook or plan does not."""
    webhook_plan: list[Case] = field(default_factory=list)
    """(ii) the webhook and plan differ."""
    webhook_only: list[Case] = field(default_factory=list)
    """(iii) the API server accepts, the webhook refuses: a failure on SCHEMA_EXACT fields."""
    recorded: list[Case] = field(default_factory=list)
    """(iii) the same on other fields: recorded only."""

    def failing(self) -> bool:
        return bool(self.api_only or self.webhook_plan or self.webhook_only)

    def report(self) -> str:
        """One table per kind of disagreement: a row per field and verdicts, its first few
        values and how many there were."""
        parts = []
        for title, cases in (
            ("(i) the API server refuses, the webhook or plan accepts", self.api_only),
            ("(ii) the webhook and plan differ", self.webhook_plan),
            ("(iii) SCHEMA_EXACT: the API server accepts, the webhook refuses", self.webhook_only),
            ("recorded: the webhook refuses more (checks the schema cannot say)", self.recorded),
        ):
            if not cases:
                continue
            groups: dict[tuple[str, str, str], list[Case]] = {}
            for case in cases:
                groups.setdefault((case.leaf.name, case.base, case.verdicts()), []).append(case)
            rows = "\n".join(_row(group) for group in groups.values())
            parts.append(f"### {title}: {len(cases)} values\n\n{TABLE_HEAD}\n{rows}\n")
        return "\n".join(parts)


def _row(group: list[Case]) -> str:
    first = group[0]
    values = ", ".join(f"`{_shown(c.value)}`" for c in group[:4])
    if len(group) > 4:
        values += f" (+{len(group) - 4} more)"
    api, webhook, plan_ = first.verdicts().split("/")
    return (
        f"| {first.leaf.name} | {first.base} | {values} | {api} | {webhook} | {plan_} | "
        f"{first.messages()} |"
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return (text if len(text) <= 40 else text[:37] + "...").replace("|", "\\|")


def all_cases() -> list[Case]:
    cases = []
    for leaf in LEAVES:
        base, valid = base_for(leaf)
        for value in values_for(leaf, valid):
            obj = with_value(base.obj, leaf, value)
            cases.append(
                Case(leaf, base.name, value, webhook_verdict(obj), plan_verdict(obj, base))
            )
    return cases


def judge(cases: list[Case]) -> Findings:
    found = Findings()
    for case in cases:
        api, webhook, plan_ = case.apiserver[0], case.webhook[0], case.plan[0]
        if api and not (webhook and plan_):
            found.api_only.append(case)
        if webhook != plan_:
            found.webhook_plan.append(case)
        if webhook and not api:
            # A null is the field's absence (the API server prunes it): whether the target
            # format needs the field is no matter of its grammar.
            exact = case.value is not None and (
                case.leaf.name in SCHEMA_EXACT or case.leaf.field in SCHEMA_EXACT
            )
            (found.webhook_only if exact else found.recorded).append(case)
    return found


# -- the test ----------------------------------------------------------------------------------


def test_every_leaf_is_walked() -> None:
    names = {leaf.name for leaf in LEAVES}
    assert "spec.proxy.ignoreInboundPorts[]" in names
    assert "spec.rollout.canary.stableFor" in names
    assert "spec.global.identityContext.trustAnchorsPEM" in names
    assert names >= SCHEMA_EXACT, SCHEMA_EXACT - names


async def test_apiserver_webhook_and_plan_agree_on_every_field(kube: KubeClient) -> None:
    await scenario.install_crd(kube)
    cases = await asyncio.to_thread(all_cases)
    limit = asyncio.Semaphore(32)

    async def ask(case: Case) -> None:
        obj = with_value(next(b for b in BASES if b.name == case.base).obj, case.leaf, case.value)
        async with limit:
            case.apiserver = await apiserver_verdict(kube, obj)

    await asyncio.gather(*(ask(c) for c in cases))
    found = judge(cases)
    text = f"{len(LEAVES)} fields, {len(cases)} values\n\n{found.report()}"
    if REPORT:
        await asyncio.to_thread(Path(REPORT).write_text, text)
    assert not found.failing(), text
