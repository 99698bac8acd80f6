"""YAML as Linkerd's Go reads it (issue 39, finding 2): ``values`` taken as the JSON value
``sigs.k8s.io/yaml`` makes of it.

Linkerd reads ``linkerd-config``'s ``values`` with ``sigs.k8s.io/yaml`` (edge-26.8.3 pins
v1.6.0: the injector's ``config.Values``, ``linkerd upgrade``), and so does Helm: the text is
decoded by ``go.yaml.in/yaml/v2`` (v2.4.4, gopkg.in/yaml.v2 v2.4.0's rules) into
``interface{}``, its keys are made strings, and the result is JSON. PyYAML reads plain
scalars by other rules, so a value this controller does not manage (kept and written back)
could change meaning in a read and a re-dump: ``0o17`` is PyYAML's string and Go's 15, ``y``
and ``on`` Go's ``true``, ``1_000`` Go's 1000, ``08`` Go's float 8, ``0b-101`` Go's -5,
``2001-12-14T21:59:43Z`` PyYAML's datetime and Go's unchanged string, ``1e3`` PyYAML's
string and Go's float 1000, ``1e400`` PyYAML's infinity and Go's string; keys ``1`` and
``'1'`` are two to PyYAML and one, ``"1"``, to Go.

``value`` reads a text as that JSON value, within ``formats.bounded``'s bounds (size, depth,
count, no anchor or alias): plain scalars by yaml.v2's ``resolve`` (ported below, rule for
rule), quoted and block scalars as strings, every key the string Go makes of it. It refuses,
naming line and column:

* what Go refuses: a null key, an integer key beyond int64 (``unsupported map key``), a value
  ``.inf``/``.nan`` (JSON holds neither: ``json: unsupported value``);
* what Go merges silently: two keys that are one string to it (``1`` and ``'1'``, ``true``
  and ``yes``, ``1.0`` and ``1``), the same key twice (yaml.v2 keeps the last): which one
  counts would be a guess;
* what Linkerd's writers never write and readers differ on: an explicit tag (``!!str 1``,
  ``!!binary``, ``!custom``), a merge key ``<<``, a second document (Go reads the first
  only), a ``%YAML`` version other than 1.1.

``plain_string`` says whether a string written plain is read back as itself; the values
writer quotes every other (``helm_values.dump_values``), and writes ints, floats (always with
``.`` or ``e``), booleans and nulls as Go reads them back: the same value, of the same Go
type.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal, localcontext
from typing import Any, Final, TypeAlias

import yaml

from linkerd_config.linkerd.formats import bounded

__all__ = ["Scalar", "key_string", "plain_string", "resolve", "value"]

Scalar: TypeAlias = bool | int | float | str | None

INT64_MAX: Final = 2**63 - 1
UINT64_MAX: Final = 2**64 - 1
READER: Final = "Linkerd's reader (sigs.k8s.io/yaml)"

_CLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# -- plain scalars: yaml.v2's resolve.go ---------------------------------------------------------

_WORDS: Final[dict[str, Scalar]] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE",
                     "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE",
                     "off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}  # fmt: skip
"""resolveMap. Go's has ``<<`` too, never reached: ``<`` has no hint (a plain ``<<`` value is
the string; as a key, a merge)."""

_HINTS: Final = {
    **dict.fromkeys("+-", "S"),
    **dict.fromkeys("0123456789", "D"),
    **dict.fromkeys("yYnNtTfFoO~", "M"),
    ".": ".",
}
"""resolveTable, by first byte: any other first character (a non-ASCII one too) makes the
scalar a string at once."""

_YAML_STYLE_FLOAT: Final = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT: Final = re.compile(r"\.([0-9_]*)(?:[eE][-+]?[0-9][0-9_]*)?")
"""What Go's ParseFloat accepts of a text starting with ``.`` (readFloat: digits and
underscores, an exponent whose first character is a digit)."""
_PREFIXES: Final = {"b": 2, "o": 8, "x": 16}


def resolve(text: str) -> Scalar:
    """What yaml.v2 makes of the plain scalar ``text`` decoded into ``interface{}`` (its
    ``resolve``, then ``decoder.scalar``): null, a bool, an int (int64 or uint64), a float, or
    the text itself. A timestamp stays its text (decode.go keeps the string "for backward
    compatibility"), so it needs no rule: nothing starting ``YYYY-`` parses as a number."""
    hint = _HINTS.get(text[0]) if text else "M"
    if hint is None:
        return text
    if text in _WORDS:
        return _WORDS[text]
    if hint == "M":
        return text
    if hint == ".":
        number = _dot_float(text)
        return text if number is None else number
    plain = text.replace("_", "")  # every underscore, anywhere, before any parse
    integer = _parse_int(plain, 0)
    if integer is None:
        integer = _parse_uint(plain, 0)
    if integer is not None:
        return integer
    if _YAML_STYLE_FLOAT.fullmatch(plain):
        number = _finite(plain)
        if number is not None:
            return number
    if plain.startswith("0b"):  # then a sign may follow: 0b-101 is -5
        integer = _parse_int(plain[2:], 2)
        if integer is None:
            integer = _parse_uint(plain[2:], 2)
        if integer is not None:
            return integer
    elif plain.startswith("-0b"):
        integer = _parse_int("-" + plain[3:], 2)
        if integer is not None:
            return integer
    return text


def plain_string(text: str) -> bool:
    """Whether ``text`` written as a plain scalar is read back by Go as this string."""
    resolved = resolve(text)
    return isinstance(resolved, str) and resolved == text


def _parse_uint(text: str, base: int) -> int | None:
    """Go's ``strconv.ParseUint(text, base, 64)``, None where it errs; base 0 reads Go's
    prefixes (0b, 0o, 0x, any case) and a leading 0 as octal. ``text`` holds no underscore
    (yaml.v2 took them out)."""
    if not text:
        return None
    if base == 0:
        base = 10
        if text[0] == "0":
            prefix = _PREFIXES.get(text[1:2].lower()) if len(text) >= 3 else None
            base, text = (prefix, text[2:]) if prefix else (8, text[1:])
    number = 0
    for character in text:
        if not (character.isascii() and character.isalnum()):
            return None
        digit = int(character, 36)
        if digit >= base:
            return None
        number = number * base + digit
        if number > UINT64_MAX:
            return None
    return number


def _parse_int(text: str, base: int) -> int | None:
    """Go's ``strconv.ParseInt(text, base, 64)``, None where it errs."""
    negative = text[:1] == "-"
    magnitude = _parse_uint(text[1:] if text[:1] in ("-", "+") else text, base)
    if magnitude is None or magnitude > (INT64_MAX + 1 if negative else INT64_MAX):
        return None
    return -magnitude if negative else magnitude


def _dot_float(text: str) -> float | None:
    """Go's ``strconv.ParseFloat(text, 64)`` of a text starting with ``.``."""
    found = _DOT_FLOAT.fullmatch(text)
    if found is None or not any(c.isdigit() for c in found.group(1)):
        return None
    if "_" in text and not _underscores_ok(text):
        return None
    return _finite(text.replace("_", ""))


def _underscores_ok(text: str) -> bool:
    """Go's ``strconv.underscoreOK``: each underscore between digits (or after a base
    prefix)."""
    saw = "^"
    if text[:1] in ("-", "+"):
        text = text[1:]
    hexadecimal = False
    start = 0
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in _PREFIXES:
        start, saw, hexadecimal = 2, "0", text[1].lower() == "x"
    for character in text[start:]:
        if "0" <= character <= "9" or (hexadecimal and "a" <= character.lower() <= "f"):
            saw = "0"
        elif character == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def _finite(text: str) -> float | None:
    """A decimal float Go parses; None when it overflows (Go's ParseFloat errs: ErrRange),
    as Python's float would give infinity. Both round correctly, to the same float."""
    number = float(text)
    return None if math.isinf(number) else number


# -- keys: sigs.k8s.io/yaml's convertToJSONableObject -------------------------------------------


def key_string(key: Scalar) -> str | None:
    """The JSON key sigs.k8s.io/yaml makes of a YAML key, None for one it refuses (null, and
    uint64: an integer beyond int64). A float becomes Go's ``FormatFloat(key, 'g', -1, 32)``:
    rounded to float32 first, so ``1.0`` is "1", ``1e6`` "1e+06", ``1e39`` ".inf"."""
    if key is None:
        return None
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key) if key <= INT64_MAX else None
    if isinstance(key, float):
        return _float32_text(key)
    return key


def _float32_text(number: float) -> str:
    if math.isnan(number):
        return ".nan"
    try:
        single: float = struct.unpack("<f", struct.pack("<f", number))[0]
    except OverflowError:  # beyond float32: Go's conversion gives infinity
        single = math.copysign(math.inf, number)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    sign = "-" if math.copysign(1.0, single) < 0 else ""
    if single == 0:
        return f"{sign}0"
    digits, point = _shortest_float32(abs(single))
    exponent = point - 1
    if exponent < -4 or exponent >= 6:  # %e (Go's shortest %g decides at precision 6)
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    whole = digits[:point].ljust(point, "0") if point > 0 else "0"
    fraction = "".join(
        digits[i] if 0 <= i < len(digits) else "0" for i in range(point, len(digits))
    )
    return sign + whole + (f".{fraction}" if fraction else "")


def _shortest_float32(single: float) -> tuple[str, int]:
    """The fewest decimal digits that read back as the float32 ``single`` (> 0), the closest
    of them to it, as Go's Dragonbox (``dboxFtoa32``) gives them: the digits and the decimal
    point's place (``0.digits * 10**point``). A tie goes to the even digit, but at a power of
    two (Dragonbox's shorter interval, which takes the space below as half the space above)
    to the larger: 2**-12 is 0.00024414063 to Go, where Dragonbox's reference writes ...62."""
    (bits,) = struct.unpack("<I", struct.pack("<f", single))
    shorter = bits & 0x7FFFFF == 0 and bits >> 23 > 0
    with localcontext() as context:
        context.prec = 400  # exact: float32 values have at most 150 significant digits
        exact = Decimal(single)
        if shorter:
            half_above = (Decimal(_float32_at(bits + 1)) - exact) / 2
            low, high = exact - half_above / 2, exact + half_above
        else:
            half = (exact - Decimal(_float32_at(bits - 1))) / 2
            low, high = exact - half, exact + half
        inclusive = bits % 2 == 0  # round half to even reads a boundary back as this value
        top = exact.adjusted()
        for count in range(1, 10):
            step = Decimal(1).scaleb(top - count + 1)
            floor = (exact / step).to_integral_value(ROUND_FLOOR) * step
            inside = [
                c
                for c in (floor, floor + step)
                if (low <= c <= high if inclusive else low < c < high)
            ]
            if inside:
                if len(inside) == 2 and inside[1] - exact == exact - inside[0]:
                    odd = int(inside[0] / step) % 2 == 1
                    best = inside[1] if shorter or odd else inside[0]
                else:
                    best = min(inside, key=lambda c: abs(c - exact))
                _, digit_tuple, power = best.normalize().as_tuple()
                digits = "".join(map(str, digit_tuple))
                return digits, len(digits) + int(power)
    raise AssertionError(f"no shortest form of {single!r}")  # pragma: no cover


def _float32_at(bits: int) -> float:
    found: float = struct.unpack("<f", struct.pack("<I", bits))[0]
    return found


# -- the reader ------------------------------------------------------------------------------------


@dataclass
class _Mapping:
    items: dict[str, Any] = field(default_factory=dict)
    first: dict[str, tuple[Any, Scalar, str]] = field(default_factory=dict)
    """Each key made so far: where, what it resolved to, as written."""
    key: str | None = None
    """The key whose value comes next; None while a key does."""


def value(text: str) -> Any:
    """One YAML document as Linkerd's reader takes it: the JSON value (dicts with str keys,
    lists, str, int, float, bool, None; None for no document), within ``formats.bounded``'s
    bounds; Unreadable naming line and column for what it refuses (see the module)."""
    return bounded.yaml_with(text, lambda: _read(text))


def _read(text: str) -> Any:
    stack: list[_Mapping | list[Any]] = []
    root: list[Any] = []
    for event in yaml.parse(text, Loader=_CLoader):
        mark = event.start_mark
        if isinstance(event, yaml.DocumentStartEvent):
            _document(event, seen=bool(root))
        tag = getattr(event, "tag", None)
        if tag is not None:
            bounded.refuse(
                mark,
                f"a YAML tag ({_short_tag(tag)}); Linkerd never writes one, and YAML readers "
                "differ on them",
            )
        if isinstance(event, yaml.ScalarEvent):
            top = stack[-1] if stack else None
            if isinstance(top, _Mapping) and top.key is None:
                top.key = _key(top, event)
            else:
                _place(stack, root, _scalar(event))
        elif isinstance(event, yaml.CollectionStartEvent):
            top = stack[-1] if stack else None
            if isinstance(top, _Mapping) and top.key is None:
                bounded.refuse(mark, "a mapping key that is itself a mapping or list")
            stack.append(_Mapping() if isinstance(event, yaml.MappingStartEvent) else [])
        elif isinstance(event, yaml.CollectionEndEvent):
            done = stack.pop()
            _place(stack, root, done.items if isinstance(done, _Mapping) else done)
    return root[0] if root else None


def _document(event: yaml.DocumentStartEvent, *, seen: bool) -> None:
    if seen:
        bounded.refuse(
            event.start_mark,
            "a second YAML document; Linkerd reads only the first, which one was meant would "
            "be a guess",
        )
    if event.version not in (None, (1, 1)):
        major, minor = event.version
        bounded.refuse(
            event.start_mark, f"a %YAML {major}.{minor} directive; {READER} reads YAML 1.1"
        )


def _place(stack: list[_Mapping | list[Any]], root: list[Any], item: Any) -> None:
    if not stack:
        root.append(item)
        return
    top = stack[-1]
    if isinstance(top, list):
        top.append(item)
    else:
        assert top.key is not None
        top.items[top.key] = item
        top.key = None


def _scalar(event: yaml.ScalarEvent) -> Scalar:
    if not event.implicit[0]:  # quoted or a block: a string
        return str(event.value)
    resolved = resolve(event.value)
    if isinstance(resolved, float) and not math.isfinite(resolved):
        bounded.refuse(
            event.start_mark,
            f"{event.value} is a float JSON cannot hold; {READER} refuses the whole of a "
            "text holding one (json: unsupported value)",
        )
    return resolved


def _key(mapping: _Mapping, event: yaml.ScalarEvent) -> str:
    mark, written = event.start_mark, _written(event)
    plain = bool(event.implicit[0])
    if plain and event.value == "<<":
        bounded.refuse(
            mark, "a YAML merge key (<<); Linkerd never writes one, and readers merge differently"
        )
    resolved = resolve(event.value) if plain else str(event.value)
    key = key_string(resolved)
    if key is None:
        what = "null" if resolved is None else "an integer beyond int64"
        bounded.refuse(
            mark,
            f"key {written or repr('')} is {what}: {READER} refuses the whole of a text holding "
            "one (unsupported map key)",
        )
    clash = key
    if isinstance(resolved, float) and resolved == 0:
        # 0.0 and -0.0 are one key of Go's map (== holds): the first one's, "0" or "-0".
        floats = (k for k in ("0", "-0") if isinstance(mapping.first.get(k, (0, ""))[1], float))
        clash = next(floats, key)
    if clash in mapping.first:
        first_mark, first_resolved, first_written = mapping.first[clash]
        same = written == first_written or (
            isinstance(resolved, str) and isinstance(first_resolved, str)
        )  # a and 'a': one string stated twice; yes and true: two texts Go takes for one
        first = f"first at line {first_mark.line + 1}"
        problem = (
            f"key {_clip(repr(key))} appears twice in one mapping ({first})"
            if same
            else f"key {written} and key {first_written} ({first}) are one key, "
            f"{_clip(repr(clash))}, to {READER}"
        )
        bounded.refuse(mark, f"{problem}; which one counts would be a guess")
    mapping.first[key] = (mark, resolved, written)
    return key


def _written(event: yaml.ScalarEvent) -> str:
    """A key as the text has it: plain as it is, quoted with its quotes."""
    text = str(event.value)
    if event.implicit[0]:
        return _clip(text)
    if event.style == "'":
        return _clip("'" + text.replace("'", "''") + "'")
    return _clip(json.dumps(text, ensure_ascii=False))


def _short_tag(tag: str) -> str:
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix) :] if tag.startswith(prefix) else tag


def _clip(text: str, limit: int = 64) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
