"""Reading text the cluster holds (``linkerd-config``'s keys), with bounded cost.

Anyone who may edit ``linkerd-config`` can write any text into it, and the controller reads
it on every reconcile (and ``plan``/``status`` for their diffs). So a reader here never costs
more than the text's size allows, and never hands on input whose meaning is ambiguous:

* at most ``MAX_BYTES`` of text, ``MAX_DEPTH`` levels of nesting and ``MAX_NODES`` values
  (Linkerd edge-26.8.3's own ``values``: about 8 KB, 7 levels, 340 values);
* YAML without anchors or aliases: an alias is a reference, so a few KB of aliases to
  aliases expand into billions of values ("billion laughs"). Linkerd's own writers never emit
  them (``linkerd install`` and the Helm chart render ``values`` with Helm's ``toYaml``, Go's
  YAML marshaller, which has no way to write one), so refusing them refuses nothing Linkerd
  wrote;
* no key twice in one mapping or object: which one counts would be a guess (PyYAML and
  Python's JSON take the last silently).

The checks run on the parser's event stream before anything is built, so refusing a hostile
text costs at most one linear scan of ``MAX_BYTES``. Errors are ``Unreadable`` (a
``ValueError``) saying where (line and column, when the parser knows) and why; the caller
names the ConfigMap and key.

``yaml_value`` and ``yaml_documents`` read YAML as PyYAML does (the CLI's manifests, ``plan``'s
diffs). ``values``, which Linkerd reads with Go's ``sigs.k8s.io/yaml``, is read by Go's rules
(``formats.go_yaml``, through ``yaml_with``: the same bounds, the same errors).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any, Final, NoReturn

import yaml

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "Unreadable",
    "check_size",
    "json_value",
    "refuse",
    "yaml_documents",
    "yaml_value",
    "yaml_with",
]

MAX_BYTES: Final = 256 * 1024
"""Room for a 64 KiB trust-anchor bundle (the most a LinkerdConfig states) and 20 times the
rest of Linkerd's values; a ConfigMap holds at most 1 MiB."""
MAX_DEPTH: Final = 64
MAX_NODES: Final = 20_000


class Unreadable(ValueError):
    """Text a bounded reader refuses: where in it (when known) and why."""


_CLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster


class _StrictLoader(_CLoader):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml's parser), refusing a key stated twice in a mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        first: dict[Any, yaml.Mark] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                refuse(key_node.start_mark, "a mapping key that is itself a mapping or list")
            if key in mapping:
                earlier = first[key]
                refuse(
                    key_node.start_mark,
                    f"key {_short(key)} appears twice in one mapping (first at line "
                    f"{earlier.line + 1}); which one counts would be a guess",
                )
            first[key] = key_node.start_mark
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def yaml_value(text: str) -> Any:
    """One YAML document, within the bounds above; Unreadable if not."""
    return _yaml(text, lambda: yaml.load(text, Loader=_StrictLoader))


def yaml_documents(text: str) -> list[Any]:
    """Every YAML document of ``text`` (``---``-separated), within the bounds above taken
    over the whole text; Unreadable if not."""
    documents: list[Any] = _yaml(text, lambda: list(yaml.load_all(text, Loader=_StrictLoader)))
    return documents


def yaml_with(text: str, load: Callable[[], Any]) -> Any:
    """``load()``, a reader of ``text`` by rules of its own (``formats.go_yaml``: as Linkerd's
    Go reads ``values``), run once ``text`` is within the bounds above, its errors as theirs."""
    return _yaml(text, load)


def _yaml(text: str, load: Callable[[], Any]) -> Any:
    check_size(text)
    try:
        _scan(text)
        return load()
    except Unreadable:
        raise
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "unreadable"
        if mark is None:
            raise Unreadable(f"is not YAML: {problem}") from error
        raise Unreadable(f"{_where(mark)}: is not YAML: {problem}") from error
    except yaml.YAMLError as error:
        raise Unreadable(f"is not YAML: {error}") from error
    except (ValueError, RecursionError) as error:  # e.g. an integer of 5000 digits
        raise Unreadable(f"is not usable YAML: {error}") from error


def json_value(text: str) -> Any:
    """One JSON value (strict JSON: no NaN or Infinity), within the bounds above."""
    check_size(text)
    try:
        parsed = json.loads(text, object_pairs_hook=_json_object, parse_constant=_json_constant)
    except Unreadable:
        raise
    except json.JSONDecodeError as error:
        raise Unreadable(
            f"line {error.lineno}, column {error.colno}: is not JSON: {error.msg}"
        ) from error
    except RecursionError as error:
        raise Unreadable(f"is nested more than {MAX_DEPTH} levels deep") from error
    except ValueError as error:  # e.g. an integer of 5000 digits
        raise Unreadable(f"is not usable JSON: {error}") from error
    _json_bounds(parsed)
    return parsed


# -- the bounds ---------------------------------------------------------------------------------


def check_size(text: str) -> None:
    """Unreadable when ``text`` is more than ``MAX_BYTES`` of UTF-8: what the readers refuse,
    and so what a writer must not write."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise Unreadable(f"is larger than {MAX_BYTES} bytes")


def _scan(text: str) -> None:
    """One pass over the parser's events: no anchor or alias, bounded depth and size."""
    depth = nodes = 0
    for event in yaml.parse(text, Loader=_CLoader):
        if isinstance(event, yaml.AliasEvent):
            refuse(
                event.start_mark,
                f"a YAML alias (*{event.anchor}); Linkerd never writes anchors or aliases",
            )
        if isinstance(event, yaml.NodeEvent):
            if event.anchor is not None:
                refuse(
                    event.start_mark,
                    f"a YAML anchor (&{event.anchor}); Linkerd never writes anchors or aliases",
                )
            nodes += 1
            if nodes > MAX_NODES:
                refuse(event.start_mark, f"more than {MAX_NODES} values")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                refuse(event.start_mark, f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise Unreadable(
                f"key {_short(key)} appears twice in one object; which one counts would be a guess"
            )
        found[key] = value
    return found


def _json_constant(name: str) -> NoReturn:
    raise Unreadable(f"{name} is not JSON")


def _json_bounds(parsed: Any) -> None:
    """Depth and size of parsed JSON, iteratively (its text was bounded: so is this walk)."""
    nodes = 0
    stack: list[tuple[Any, int]] = [(parsed, 1)]
    while stack:
        item, level = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise Unreadable(f"holds more than {MAX_NODES} values")
        if isinstance(item, str):
            _text(item)
        elif isinstance(item, (dict, list)):
            if level > MAX_DEPTH:
                raise Unreadable(f"is nested more than {MAX_DEPTH} levels deep")
            children = item.values() if isinstance(item, dict) else item
            if isinstance(item, dict):
                for key in item:
                    _text(key)
            stack.extend((child, level + 1) for child in children)


def _text(value: str) -> None:
    """A JSON string is text: an escaped lone surrogate (``\\udc00``) parses in Python, but
    no UTF-8 holds it (Go reads U+FFFD there, and the protobuf runtime refuses it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(error.object[error.start])
        raise Unreadable(
            f"the string {_short(value)} holds an escaped lone surrogate (U+{code:04X}), "
            "which is not text"
        ) from None


def _where(mark: Any) -> str:
    """``line L, column C`` of a PyYAML mark (libyaml's or PyYAML's own class)."""
    return f"line {mark.line + 1}, column {mark.column + 1}"


def refuse(mark: Any, problem: str) -> NoReturn:
    raise Unreadable(f"{_where(mark)}: {problem}" if mark is not None else problem)


def _short(value: Any, limit: int = 64) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
