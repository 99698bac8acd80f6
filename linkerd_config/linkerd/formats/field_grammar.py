"""The grammars of LinkerdConfig values: one object per kind of value (a port, a Go duration, an
image name, a Kubernetes quantity, ...), from which both the CRD schema node and validation's
verdict follow.

Invariant: ``Grammar.problems(value)`` is empty only if the API server's schema check of
``Grammar.schema()`` accepts ``value`` -- every schema constraint (type, maxLength,
minLength, enum, pattern, minimum, maximum, maxItems, items) is checked here too, with the
pattern matched whole as RE2 does (``re.fullmatch``; every pattern is written in the common
subset of RE2 and Python). A grammar with ``explain`` adds checks the schema cannot express
(X.509, CIDRs, port ranges): those values the API server stores, validation refuses;
``exact`` says which grammars have none. The property test
(tests/integration/test_field_grammar_agreement.py) compares both verdicts on the local
control plane.

Every string is bounded (``max_length``) and checked for length before any pattern, so no
input makes a check slow: the webhook runs on the event loop.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

__all__ = [
    "BOOLEAN",
    "CAPABILITIES",
    "CIDR_LIST",
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "DURATION",
    "ENV_VARS",
    "IGNORED_PORTS",
    "IGNORED_PORTS_TEXT",
    "IMAGE_NAME",
    "IMAGE_TAG",
    "LINKERD_VERSION",
    "LOG_LEVEL",
    "PEM_BUNDLE",
    "PORT",
    "PROXY_DURATION",
    "QUANTITY",
    "RATIO",
    "STRING_MAP",
    "Grammar",
    "character_problem",
    "count",
    "enum",
    "free_object",
    "parse_go_duration",
    "quantity_value",
    "text",
]

# Control characters (Unicode category Cc) no Linkerd setting holds; a multi-line value (a
# PEM bundle) keeps tab, line feed and carriage return. RE2 and Python both read \xNN as a
# code point; lone surrogates cannot reach the API server (its JSON decoder replaces them)
# but can reach a unit test, so Python refuses them too.
#
# Nor format characters (Unicode category Cf) and the line and paragraph separators: invisible
# in a pod spec, a template or a log (a byte-order mark, zero-width spaces and joiners, the
# bidirectional overrides that make text read other than it is), and U+2028/U+2029, which
# YAML 1.1 readers take for line breaks. Written literally in the patterns: RE2 and Python
# both read a literal code point in a class, and neither shares the other's escape for one.
FORMAT_CHARACTERS: Final = (
    "\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
)
_NO_CONTROL: Final = f"^[^\\x00-\\x1f\\x7f-\\x9f{FORMAT_CHARACTERS}]*$"
_NO_CONTROL_MULTILINE: Final = (
    f"^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f{FORMAT_CHARACTERS}]*$"
)
_FORMAT: Final = re.compile(f"[{FORMAT_CHARACTERS}]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _compiled(pattern: str) -> re.Pattern[str]:
    """``pattern`` for ``fullmatch``: its ``^``/``$`` anchors dropped (Python's ``$`` would
    also match before a final newline, RE2's does not), ASCII case folding only (Python's
    Unicode folding takes a dotless i for an i; RE2's does not)."""
    return re.compile(pattern.removeprefix("^").removesuffix("$"), re.ASCII)


@dataclass(frozen=True)
class Grammar:
    """One kind of value: its JSON type and the rules the schema and validation share."""

    json_type: str
    """``string``, ``boolean``, ``integer``, ``number``, ``int-or-string``, ``array`` or
    ``object``."""
    expected: str
    """What a value looks like, for messages: ``a duration such as 86400s``."""
    example: Any
    """A valid value: docs, tests, and a scratch row's default."""
    pattern: str | None = None
    max_length: int | None = None
    min_length: int | None = None
    enum: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    int64: bool = False
    items: Grammar | None = None
    max_items: int | None = None
    explain: Callable[[Any], str | None] | None = None
    """A check beyond the schema (None: the schema says everything)."""
    unique: Callable[[Any], Any] | None = None
    """A list's items are distinct by this key (checked on the items that pass their own
    grammar); the schema cannot say so."""
    hint: Callable[[str], str | None] | None = None
    """Why a string fails ``pattern``, more precisely than ``expected`` (messages only)."""
    multiline: bool = False
    more: str = ""
    """What else refuses a value of this grammar, outside it (a format's supported releases,
    validation's X.509 checks): such a grammar is not ``exact`` either."""
    shape: Mapping[str, Any] | None = None
    """An object's schema beyond its type (``properties``, ``additionalProperties``,
    ``x-kubernetes-preserve-unknown-fields``): Kubernetes' own shapes, such as EnvVar."""
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.pattern is not None:
            object.__setattr__(self, "_regex", _compiled(self.pattern))

    @property
    def exact(self) -> bool:
        """Whether the schema expresses every rule (validation refuses nothing more). An
        object never is: the control characters of its keys and nested strings are refused
        by validation, and no structural schema can say so of free-form content."""
        parts = (self.explain, self.unique, self.more or None)
        return (
            parts == (None, None, None)
            and self.json_type != "object"
            and (self.items is None or self.items.exact)
        )

    # -- the schema --------------------------------------------------------------------------

    def schema(self, description: str) -> dict[str, Any]:
        """The OpenAPI node of a field with this grammar."""
        node: dict[str, Any]
        if self.json_type == "int-or-string":
            node = {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            }
        else:
            node = {"type": self.json_type, **copy.deepcopy(dict(self.shape or {}))}
        if self.int64:
            node["format"] = "int64"
        for key, value in (
            ("minimum", self.minimum),
            ("maximum", self.maximum),
            ("minLength", self.min_length),
            ("maxLength", self.max_length),
            ("maxItems", self.max_items),
            ("pattern", self.pattern),
        ):
            if value is not None:
                node[key] = value
        if self.enum:
            node["enum"] = list(self.enum)
        elif self.json_type in ("string", "int-or-string") and self.pattern is None:
            node["pattern"] = _NO_CONTROL_MULTILINE if self.multiline else _NO_CONTROL
        if self.items is not None:
            node["items"] = self.items.schema(self.items.expected)
        node["description"] = description
        return node

    # -- the verdict -------------------------------------------------------------------------

    def problems(self, value: Any) -> list[tuple[str, str]]:
        """Why ``value`` is not of this grammar, as (suffix, message) pairs: the suffix is
        ``""`` or an item's ``[3]``. Never raises, whatever JSON ``value`` is."""
        if self.json_type == "array":
            return self._list_problems(value)
        problem = self._scalar_problem(value)
        return [] if problem is None else [("", problem)]

    def _list_problems(self, value: Any) -> list[tuple[str, str]]:
        if not isinstance(value, list):
            return [("", f"must be a list of {self.expected}")]
        if self.max_items is not None and len(value) > self.max_items:
            return [("", f"must have at most {self.max_items} entries")]
        found: list[tuple[str, str]] = []
        assert self.items is not None  # an array grammar always has its items'
        first: dict[Any, int] = {}
        for index, item in enumerate(value):
            problems = self.items.problems(item)
            found.extend((f"[{index}]{s}", m) for s, m in problems)
            if problems or self.unique is None:
                continue
            key = self.unique(item)
            if key in first:
                found.append((f"[{index}]", f"{_show(item)} duplicates entry [{first[key]}]"))
            else:
                first[key] = index
        return found

    def _scalar_problem(self, value: Any) -> str | None:
        if self.json_type == "boolean":
            return None if isinstance(value, bool) else "must be true or false"
        if self.json_type == "object":
            if not isinstance(value, Mapping):
                return f"must be an object: {self.expected}"
            inside = _characters_inside(value)
            if inside is not None:
                return inside
            return self.explain(value) if self.explain is not None else None
        if self.json_type == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"must be a number: {self.expected}"
            if (self.minimum is not None and value < self.minimum) or (
                self.maximum is not None and value > self.maximum
            ):
                return f"must be {self.expected}, got {value}"
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            if self.json_type == "int-or-string":
                return f"must be {self.expected}"
            kind = "an integer" if self.json_type == "integer" else "a string"
            return f"must be {kind}: {self.expected}"
        if isinstance(value, int):
            if self.json_type == "string":
                return f"must be a string: {self.expected}"
            low = -(2**63) if self.minimum is None else self.minimum
            high = 2**63 - 1 if self.maximum is None else self.maximum
            if not low <= value <= high:
                if self.maximum is None:
                    return "must not be negative" if low == 0 else f"must be at least {low}"
                return f"must be {low}-{high}, got {value}"
            return self.explain(value) if self.explain is not None else None
        if self.json_type == "integer":
            return f"must be an integer: {self.expected}"
        if self.max_length is not None and len(value) > self.max_length:
            return f"is longer than {self.max_length} characters"
        if self.min_length is not None and len(value) < self.min_length:
            return (
                "must not be empty"
                if self.min_length == 1
                else f"is shorter than {self.min_length}"
            )
        control = character_problem(value, self.multiline)
        if control is not None:
            return control
        if self.enum:
            return None if value in self.enum else f"must be one of {', '.join(self.enum)}"
        if self._regex is not None and not self._regex.fullmatch(value):
            detail = self.hint(value) if self.hint is not None else None
            empty = f"must not be empty: {self.expected}" if not value else None
            return detail or empty or f"{_show(value)} is not {self.expected}"
        return self.explain(value) if self.explain is not None else None


def character_problem(value: str, multiline: bool = False) -> str | None:
    """A control or format character (or a lone surrogate) in ``value``, said with where it
    is; None when there is none. A multi-line value keeps tab, line feed and carriage return."""
    allowed = "\t\n\r" if multiline else ""
    for index, char in enumerate(value):
        point = ord(char)
        if (point < 0x20 or 0x7F <= point <= 0x9F) and char not in allowed:
            return f"must not contain control characters (U+{point:04X} at character {index + 1})"
    invisible = _FORMAT.search(value)
    if invisible is not None:
        return (
            f"must not contain format characters (U+{ord(invisible.group()):04X} at character "
            f"{invisible.start() + 1}: invisible, or a line break to some YAML readers)"
        )
    surrogate = _SURROGATE.search(value)
    if surrogate is not None:
        return f"must not contain a lone surrogate (at character {surrogate.start() + 1})"
    return None


def _characters_inside(value: Mapping[str, Any]) -> str | None:
    """A control or format character in any key or string of an object (a free-form one
    too: the proxy's parameter maps become environment variables, a securityContext a pod's),
    said with where it is; None when there is none. A string may hold tab, line feed and
    carriage return (an annotation's value may be multi-line), a key none. Walked without
    recursion (the API server's nesting bound is far deeper than Python's stack)."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, Mapping):
            for key, child in item.items():
                problem = character_problem(str(key))
                if problem is not None:
                    return f"key {_show(f'{where}{key}')} {problem}"
                stack.append((f"{where}{key}.", child))
        elif isinstance(item, list):
            stack.extend((f"{where.rstrip('.')}[{i}].", child) for i, child in enumerate(item))
        elif isinstance(item, str):
            problem = character_problem(item, multiline=True)
            if problem is not None:
                return f"{_show(where.rstrip('.'))} {problem}"
    return None


def _show(value: Any, limit: int = 64) -> str:
    """A value for a message: quoted, and cut short so huge input makes no huge answer."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit - 3]}..."


# -- plain kinds ---------------------------------------------------------------------------------

BOOLEAN: Final = Grammar("boolean", "true or false", True)
PORT: Final = Grammar("integer", "a port 1-65535", 4191, minimum=1, maximum=65535)


def text(max_length: int, expected: str, example: str, *, multiline: bool = False) -> Grammar:
    """Free text: bounded, no control characters."""
    return Grammar("string", expected, example, max_length=max_length, multiline=multiline)


def enum(*values: str) -> Grammar:
    return Grammar("string", f"one of {', '.join(values)}", values[0], enum=values)


# -- Go durations ---------------------------------------------------------------------------------

# Go's time.ParseDuration units, in nanoseconds (both micro signs).
_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_MAX_NANOS = 2**63 - 1


def parse_go_duration(value: str) -> int:
    """Nanoseconds in a Go duration string ("86400s", "24h", "1h30m", "1.5s", "300ms").

    Follows Go's ``time.ParseDuration``: an optional sign, then one or more decimal numbers
    each with a unit; "0" alone needs none; the total must fit in an int64 of nanoseconds.
    Fractions below a nanosecond are truncated, as Go does. (The DURATION grammar is
    stricter: no sign, no bare "0", no "1." -- what the CRD pattern allows.)
    """
    error = ValueError(
        f"{value!r} is not a duration: expected a number and unit such as 86400s, 24h or 1h30m"
    )
    rest = value
    negative = rest[:1] == "-"
    if rest[:1] in ("-", "+"):
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise error
    total = Fraction(0)
    while rest:
        match = _DURATION_PART.match(rest)
        if match is None or match.end() == 0:
            raise error
        whole, fraction, unit = match.groups()
        if not whole and not fraction:
            raise error
        if unit not in _UNITS:
            raise ValueError(
                f"{value!r} is not a duration: unknown unit {unit!r} (use ns, us, ms, s, m or h)"
            )
        number = Fraction(int(whole or "0"))
        if fraction:
            number += Fraction(int(fraction), 10 ** len(fraction))
        total += number * _UNITS[unit]
        rest = rest[match.end() :]
    nanos = int(total)  # truncates toward zero, like Go
    if nanos > _MAX_NANOS:
        raise ValueError(f"{value!r} is out of range: durations end at about 292 years")
    return -nanos if negative else nanos


def _duration_explain(value: Any) -> str | None:
    try:
        nanos = parse_go_duration(value)
    except ValueError as error:
        return str(error)
    return None if nanos > 0 else f"{_show(value)} must be a positive duration"


def _duration_hint(value: str) -> str | None:
    try:
        nanos = parse_go_duration(value)
    except ValueError as error:
        return str(error)
    if nanos <= 0:
        return f"{_show(value)} must be a positive duration"
    return (
        f"{_show(value)} is not a duration as the CRD takes it: digits and a unit, "
        "e.g. 86400s, 1h30m or 1.5s (no sign, no bare 0)"
    )


DURATION_PATTERN: Final = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$"
DURATION: Final = Grammar(
    "string",
    "a duration such as 86400s or 1h30m",
    "86400s",
    pattern=DURATION_PATTERN,
    max_length=64,
    explain=_duration_explain,
    hint=_duration_hint,
)
"""Positive, as Go parses it; the explain step only bounds the total (292 years) and
refuses zero."""


# -- the proxy's own durations -------------------------------------------------------------------


def _proxy_duration_explain(value: Any) -> str | None:
    return (
        f"{_show(value)} must be a positive duration"
        if int(str(value)[:-1].rstrip("m")) == 0
        else None
    )


PROXY_DURATION: Final = Grammar(
    "string",
    "a duration as the proxy reads it: a whole number and ms, s, m, h or d, e.g. 1000ms",
    "1000ms",
    # linkerd2-proxy's parse_duration: ^\s*(\d+)(ms|s|m|h|d)?\s*$ (a unit unless 0), into a
    # u64: 18 digits always fit. The value reaches it verbatim (LINKERD2_PROXY_*_TIMEOUT).
    pattern=r"^[0-9]{1,18}(ms|s|m|h|d)$",
    max_length=20,
    explain=_proxy_duration_explain,
)
"""Not Go's grammar: "1.5s", "1h30m" or "250us" pass Go's parser, and the proxy refuses
them and never starts."""

# -- names, images, versions ---------------------------------------------------------------------

DNS_LABEL: Final = Grammar(
    "string",
    "a DNS-1123 label (lower-case letters, digits and '-'), e.g. linkerd",
    "linkerd",
    pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    max_length=63,
)
DNS_SUBDOMAIN: Final = Grammar(
    "string",
    "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.'), e.g. cluster.local",
    "cluster.local",
    pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    max_length=253,
)
# The container image reference grammar (distribution/reference), name part only: an
# optional registry host[:port], then lower-case path components joined by separators.
_DOMAIN_PART: Final = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART: Final = r"[a-z0-9]+(([_.]|__|-+)[a-z0-9]+)*"
IMAGE_NAME: Final = Grammar(
    "string",
    "an image name ([registry[:port]/]path of lower-case components, no tag), "
    "e.g. cr.l5d.io/linkerd/proxy",
    "cr.l5d.io/linkerd/proxy",
    pattern=rf"^({_DOMAIN_PART}(\.{_DOMAIN_PART})*(:[0-9]+)?/)?{_PATH_PART}(/{_PATH_PART})*$",
    max_length=255,
)
IMAGE_TAG: Final = Grammar(
    "string",
    "an image tag, e.g. stable-2.7.0",
    "stable-2.7.0",
    pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$",
    max_length=128,
)
LINKERD_VERSION: Final = Grammar(
    "string",
    "a Linkerd version: edge-YY.M.N (e.g. edge-19.12.3) or stable-X.Y.Z (e.g. stable-2.6.1)",
    "edge-26.8.3",
    # formats.versions.parse_version's grammar, exactly.
    pattern=r"^(edge-[0-9]{2}\.([1-9]|1[0-2])\.(0|[1-9][0-9]{0,8})"
    r"|stable-(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8}))$",
    max_length=64,
    more="a release some format reads (stable-2.6.0 / edge-19.12.1 on)",
)

# -- the proxy's log filter ----------------------------------------------------------------------

_LOG_LEVELS: Final = ("trace", "debug", "info", "warn", "error", "off")
_RUST_PATH: Final = r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*"
_DIRECTIVE: Final = rf"({_RUST_PATH}=)?(?i:{'|'.join(_LOG_LEVELS)})"
_RUST_PATH_RE: Final = re.compile(_RUST_PATH)


def _log_level_hint(value: str) -> str | None:
    """Which directive of a refused log filter is wrong, and how."""
    levels = "/".join(_LOG_LEVELS)
    if not value:
        return "must name a level, e.g. warn,linkerd2_proxy=info"
    for directive in value.split(","):
        target, _, level = directive.rpartition("=")
        if not directive:
            return f"{_show(value)} has an empty directive (a stray comma)"
        if level.lower() not in _LOG_LEVELS:
            return f"{_show(directive)}: the level must be one of {levels}"
        if "=" in directive and not _RUST_PATH_RE.fullmatch(target):
            return (
                f"{_show(directive)}: the target must be a Rust module path "
                "such as linkerd2_proxy::app"
            )
    return None


LOG_LEVEL: Final = Grammar(
    "string",
    "a proxy log filter such as warn,linkerd2_proxy=info",
    "warn,linkerd2_proxy=info",
    pattern=rf"^{_DIRECTIVE}(,{_DIRECTIVE})*$",
    max_length=1024,
    hint=_log_level_hint,
)

# -- networks ------------------------------------------------------------------------------------

_MAX_NETWORKS: Final = 256


_CIDR: Final = r"[0-9A-Fa-f:.]+/[0-9]{1,3}"


def _networks_explain(value: Any) -> str | None:
    """Comma-separated CIDRs, as Linkerd's injector reads them: Go's ``net.ParseCIDR`` on
    each entry as it is (no spaces; an address, ``/`` and a prefix length; host bits may be
    set; no zone, no netmask form)."""
    entries = str(value).split(",")
    if len(entries) > _MAX_NETWORKS:
        return f"must have at most {_MAX_NETWORKS} networks"
    for index, entry in enumerate(entries):
        try:
            if not re.fullmatch(_CIDR, entry, re.ASCII):
                raise ValueError(entry)
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return (
                f"network {index + 1}, {_show(entry)}, is not a CIDR such as 10.0.0.0/8 "
                "or fd00::/8 (no spaces)"
            )
    return None


CIDR_LIST: Final = Grammar(
    "string",
    "comma-separated CIDRs, e.g. 10.0.0.0/8,100.64.0.0/10",
    "10.0.0.0/8,100.64.0.0/10",
    pattern=rf"^{_CIDR}(,{_CIDR})*$",
    max_length=4096,
    explain=_networks_explain,
    hint=_networks_explain,
)

# -- ports the proxy does not intercept ----------------------------------------------------------

_MAX_PORT: Final = 65535


def _port_entry_explain(value: Any) -> str | None:
    low, _, high = str(value).partition("-")
    first, last = int(low), int(high or low)
    if not (1 <= first <= _MAX_PORT and 1 <= last <= _MAX_PORT):
        return f"{_show(value)}: ports must be 1-65535"
    if first > last:
        return f"{_show(value)} is not a range: {first} is greater than {last}"
    return None


def _port_range(entry: Any) -> tuple[int, int]:
    low, _, high = str(entry).partition("-")
    return int(low), int(high or low)


IGNORED_PORTS: Final = Grammar(
    "array",
    'ports ("8888") or port ranges ("1000-2000")',
    ["25", "3306", "10000-10100"],
    items=Grammar(
        "string",
        'a port ("8888") or a port range ("1000-2000")',
        "8888",
        pattern=r"^(0|[1-9][0-9]{0,4})(-(0|[1-9][0-9]{0,4}))?$",
        max_length=11,
        explain=_port_entry_explain,
    ),
    max_items=256,
    unique=_port_range,
)

_PORT_ENTRY: Final = r"(0|[1-9][0-9]{0,4})(-(0|[1-9][0-9]{0,4}))?"


def _port_list_explain(value: Any) -> str | None:
    entries = value.split(",") if value else []
    for suffix, message in IGNORED_PORTS.problems(entries):
        where = f"entry {int(suffix[1:].split(']')[0]) + 1}: " if suffix else ""
        return where + message
    return None


IGNORED_PORTS_TEXT: Final = Grammar(
    "string",
    'ports and port ranges, comma-separated, as Linkerd takes them ("25,3306,10000-10100")',
    "25,3306,10000-10100",
    pattern=rf"^({_PORT_ENTRY}(,{_PORT_ENTRY})*)?$",
    max_length=256 * 12,
    explain=_port_list_explain,
)
"""IGNORED_PORTS as one string, Linkerd's own type (v1alpha2): the same entries, the same
limits, no spaces (so that it converts to the list and back unchanged)."""

# -- Kubernetes quantities -----------------------------------------------------------------------

# resource.ParseQuantity's grammar with an integer exponent (Go refuses "1e2.5"), and no
# negative sign: a resource amount is never negative.
_QUANTITY: Final = re.compile(
    r"\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_BINARY: Final = {
    s: 2 ** (10 * (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
}
_DECIMAL: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_MAX_EXPONENT: Final = 1000


def quantity_value(value: Any) -> Fraction | None:
    """The amount of a quantity the QUANTITY grammar accepts; None for any other value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value) if value >= 0 else None
    match = _QUANTITY.fullmatch(value) if isinstance(value, str) and len(value) <= 64 else None
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    if suffix in _BINARY:
        return Fraction(number) * Fraction(_BINARY[suffix])
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
    if abs(exponent) > _MAX_EXPONENT:
        return None
    return Fraction(number) * Fraction(
        10**exponent if exponent >= 0 else Fraction(1, 10**-exponent)
    )


def _quantity_hint(value: str) -> str | None:
    return "must not be negative" if value.startswith("-") else None


def _quantity_explain(value: Any) -> str | None:
    return None if quantity_value(value) is not None else f"{_show(value)} is out of range"


QUANTITY: Final = Grammar(
    "int-or-string",
    'a quantity such as "100m" or "20Mi"',
    "100m",
    pattern=r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$",
    max_length=64,
    minimum=0,
    explain=_quantity_explain,
    hint=_quantity_hint,
)
"""The explain step only bounds the exponent (|e| <= 1000): a 64-character quantity is
otherwise a number no amount of memory holds."""

# -- the trust anchors ---------------------------------------------------------------------------

PEM_BUNDLE: Final = Grammar(
    "string",
    "a PEM bundle of CA certificates",
    "",
    max_length=65536,
    multiline=True,
    more="CA certificates, valid now (validation parses them)",
)
"""The text only; validation parses the certificates (``validation.trust_anchor``)."""

# -- Kubernetes shapes Linkerd passes through ----------------------------------------------------


def free_object(expected: str, example: Mapping[str, Any]) -> Grammar:
    """An object Linkerd passes to Kubernetes or the proxy as it is (a securityContext, the
    proxy's parameter maps): its shape is theirs, its size validation's bounds."""
    return Grammar(
        "object", expected, dict(example), shape={"x-kubernetes-preserve-unknown-fields": True}
    )


def _strings_only(value: Mapping[str, Any]) -> str | None:
    for key, item in value.items():
        if not isinstance(item, str):
            return f"{_show(key)} must map to a string"
        if len(item) > 4096:
            return f"{_show(key)} maps to more than 4096 characters"
    return None


STRING_MAP: Final = Grammar(
    "object",
    "a map of strings",
    {"team": "payments"},
    shape={"additionalProperties": {"type": "string", "maxLength": 4096}},
    explain=_strings_only,
)


_ENV_VAR_KEYS: Final = frozenset({"name", "value", "valueFrom"})
ENV_VAR_NAME: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
"""An environment variable's name as Kubernetes validates it (``IsEnvVarName``, the rule
every supported Kubernetes applies; 1.32+ may relax it): anything else, and every injected
pod would be refused."""
_ENV_VAR_NAME: Final = _compiled(ENV_VAR_NAME)


def _env_var_explain(value: Mapping[str, Any]) -> str | None:
    unknown = sorted(str(key) for key in value if key not in _ENV_VAR_KEYS)
    if unknown:  # the API server's strict decoding refuses them (kubectl apply)
        return (
            f"has no field {_show(unknown[0])} (an environment variable has name, value, valueFrom)"
        )
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return "needs a name"
    if len(name) > 256:
        return "name is longer than 256 characters"
    if not _ENV_VAR_NAME.fullmatch(name):
        return (
            f"name {_show(name)} is not an environment variable name Kubernetes admits "
            "(letters, digits, '_', '-' and '.', not starting with a digit): every injected "
            "pod would be refused"
        )
    if value.get("value") is not None and not isinstance(value.get("value"), str):
        return "value must be a string"
    if value.get("valueFrom") is not None and not isinstance(value.get("valueFrom"), Mapping):
        return "valueFrom must be an object"
    return None


ENV_VARS: Final = Grammar(
    "array",
    "environment variables, as a container's env: [{name, value}] or [{name, valueFrom}]",
    [{"name": "FOO", "value": "bar"}],
    items=Grammar(
        "object",
        "an environment variable {name, value} or {name, valueFrom}",
        {"name": "FOO", "value": "bar"},
        shape={
            "required": ["name"],
            "properties": {
                "name": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 256,
                    "pattern": ENV_VAR_NAME,
                },
                "value": {"type": "string"},
                "valueFrom": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        explain=_env_var_explain,
    ),
    max_items=256,
)

CAPABILITIES: Final = Grammar(
    "array",
    "Linux capability names, e.g. NET_ADMIN",
    ["NET_ADMIN"],
    items=Grammar(
        "string",
        "a capability name such as NET_ADMIN",
        "NET_ADMIN",
        pattern=r"^[A-Za-z_]+$",
        max_length=64,
    ),
    max_items=64,
)


def count(expected: str, example: int, *, minimum: int = 0, int64: bool = False) -> Grammar:
    """A whole number: seconds, a thread count, an ID (int32 unless ``int64``, which the
    schema's ``format`` bounds: a maximum of 2**63-1 would reach the API server as a float)."""
    maximum = None if int64 else 2**31 - 1
    return Grammar("integer", expected, example, minimum=minimum, maximum=maximum, int64=int64)


RATIO: Final = Grammar("number", "a ratio above 0, at most 1", 0.5, minimum=0, maximum=1)


def grammar_of(schema: Mapping[str, Any]) -> str:
    """A schema node's kind, for docs: ``integer 1-65535``, ``string (pattern)``."""
    kind = str(schema.get("type") or "int-or-string")
    if "enum" in schema:
        return " or ".join(f"`{v}`" for v in schema["enum"])
    if "minimum" in schema and "maximum" in schema:
        return f"{kind} {schema['minimum']}-{schema['maximum']}"
    return kind
