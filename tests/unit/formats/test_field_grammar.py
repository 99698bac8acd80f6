"""The grammars of the field table, case by case: each row a value, whether the grammar takes
it, and a phrase of the message when not. The hard cases are where Python's and the API
server's (RE2's) readings of a pattern could part: a trailing newline, non-ASCII digits and
letters, signs, the two micro signs Go takes."""

from __future__ import annotations

from typing import Any

import pytest

from linkerd_config.linkerd.formats import field_grammar as g

CASES: list[tuple[g.Grammar, Any, str | None]] = [
    # durations: the CRD's form (digits and a unit, no sign, no bare 0), positive, in range
    (g.DURATION, "86400s", None),
    (g.DURATION, "1h30m", None),
    (g.DURATION, "1.5s", None),
    (g.DURATION, "1\u00b5s", None),
    (g.DURATION, "1\u03bcs", None),
    (g.DURATION, "1s\n", "control characters (U+000A"),
    (g.DURATION, "+1s", "not a duration as the CRD takes it"),
    (g.DURATION, "1.s", "not a duration as the CRD takes it"),
    (g.DURATION, "0", "must be a positive duration"),
    (g.DURATION, "0s", "must be a positive duration"),
    (g.DURATION, "-5s", "must be a positive duration"),
    (g.DURATION, "5 parsecs", "unknown unit"),
    (g.DURATION, "\uff11s", "not a duration"),  # a fullwidth digit
    (g.DURATION, "9223372036854775808ns", "out of range"),
    (g.DURATION, 86400, "must be a string"),
    # the proxy's own durations (connect timeouts): linkerd2-proxy's grammar, not Go's
    (g.PROXY_DURATION, "1000ms", None),
    (g.PROXY_DURATION, "10d", None),
    (g.PROXY_DURATION, "1.5s", "as the proxy reads it"),
    (g.PROXY_DURATION, "1h30m", "as the proxy reads it"),
    (g.PROXY_DURATION, "250us", "as the proxy reads it"),
    (g.PROXY_DURATION, "1\u00b5s", "as the proxy reads it"),
    (g.PROXY_DURATION, "0ms", "must be a positive duration"),
    # ports and other integers
    (g.PORT, 4191, None),
    (g.PORT, 0, "must be 1-65535, got 0"),
    (g.PORT, 65536, "must be 1-65535, got 65536"),
    (g.PORT, True, "must be an integer"),
    (g.PORT, 41.5, "must be an integer"),
    (g.PORT, "4191", "must be an integer"),
    # the ignored ports: no leading zeros, in range, low <= high, no repeats
    (g.IGNORED_PORTS, ["25", "1000-2000"], None),
    (g.IGNORED_PORTS, ["025"], "is not a port"),
    (g.IGNORED_PORTS, ["0"], "ports must be 1-65535"),
    (g.IGNORED_PORTS, ["9000-80"], "9000 is greater than 80"),
    (g.IGNORED_PORTS, ["25", "25"], "duplicates entry [0]"),
    (g.IGNORED_PORTS, "25", "must be a list"),
    (g.IGNORED_PORTS, ["25"] * 257, "at most 256 entries"),
    # quantities: Go's grammar, an integer exponent, never negative
    (g.QUANTITY, "100m", None),
    (g.QUANTITY, "20Mi", None),
    (g.QUANTITY, "3e18", None),
    (g.QUANTITY, 2, None),
    (g.QUANTITY, "1e2.5", "is not a quantity"),
    (g.QUANTITY, "-1", "must not be negative"),
    (g.QUANTITY, -1, "must not be negative"),
    (g.QUANTITY, "1e99999", "out of range"),
    (g.QUANTITY, 1.5, "must be a quantity"),
    # names, images, tags, versions
    (g.DNS_LABEL, "linkerd", None),
    (g.DNS_LABEL, "Linkerd", "DNS-1123 label"),
    (g.DNS_LABEL, "linkerd\n", "control characters"),
    (g.DNS_SUBDOMAIN, "cluster.local", None),
    (g.DNS_SUBDOMAIN, "cluster..local", "DNS-1123 subdomain"),
    (g.IMAGE_NAME, "cr.l5d.io/linkerd/proxy", None),
    (g.IMAGE_NAME, "localhost:5000/proxy", None),
    (g.IMAGE_NAME, "cr.l5d.io/linkerd/proxy:edge-26.8.3", "is not an image name"),
    (g.IMAGE_NAME, "cr.l5d.io/Linkerd/proxy", "is not an image name"),
    (g.IMAGE_TAG, "a" * 128, None),
    (g.IMAGE_TAG, "a" * 129, "longer than 128"),
    (g.IMAGE_TAG, ".hidden", "is not an image tag"),
    (g.IMAGE_TAG, "", "must not be empty"),
    (g.LINKERD_VERSION, "edge-19.12.3", None),
    (g.LINKERD_VERSION, "stable-2.6.1", None),
    (g.LINKERD_VERSION, "edge-19.13.1", "is not a Linkerd version"),
    (g.LINKERD_VERSION, "edge-19.012.1", "is not a Linkerd version"),
    # the proxy's log filter: levels in any case, Rust module paths as targets
    (g.LOG_LEVEL, "warn,linkerd2_proxy=info", None),
    (g.LOG_LEVEL, "INFO,linkerd::app=Debug", None),
    (g.LOG_LEVEL, "loud", "the level must be one of"),
    (g.LOG_LEVEL, "\u0131nfo", "the level must be one of"),  # dotless i: RE2 folds ASCII only
    (g.LOG_LEVEL, "\u0130NFO", "the level must be one of"),
    (g.LOG_LEVEL, "warn,", "empty directive"),
    (g.LOG_LEVEL, "linkerd-proxy=info", "Rust module path"),
    (g.LOG_LEVEL, "", "must name a level"),
    # networks: CIDRs as Go parses them (host bits may be set)
    (g.CIDR_LIST, "10.0.0.1/8,fd00::/8", None),
    (g.CIDR_LIST, "10.0.0.0/33", "network 1"),
    (g.CIDR_LIST, "10.0.0.0/8,", "network 2"),
    # Go's net.ParseCIDR, as the injector calls it on each entry untrimmed
    (g.CIDR_LIST, "10.0.0.0/8, 10.1.0.0/16", "network 2"),
    (g.CIDR_LIST, "10.0.0.0", "network 1"),
    (g.CIDR_LIST, "10.0.0.0/255.0.0.0", "network 1"),
    (g.CIDR_LIST, "fe80::%eth0/64", "network 1"),
    # free text and enums
    (g.PEM_BUNDLE, "-----BEGIN CERTIFICATE-----\r\n\tx\n", None),
    (g.PEM_BUNDLE, "x\x00", "control characters (U+0000"),
    (g.enum("plain", "json"), "json", None),
    (g.enum("plain", "json"), "JSON", "must be one of plain, json"),
    (g.BOOLEAN, False, None),
    (g.BOOLEAN, "true", "must be true or false"),
]


@pytest.mark.parametrize(("grammar", "value", "phrase"), CASES)
def test_grammar(grammar: g.Grammar, value: Any, phrase: str | None) -> None:
    problems = grammar.problems(value)
    if phrase is None:
        assert problems == []
    else:
        assert len(problems) >= 1 and phrase in problems[0][1], problems


@pytest.mark.parametrize(
    "grammar",
    [g.DURATION, g.PROXY_DURATION, g.DNS_LABEL, g.DNS_SUBDOMAIN, g.IMAGE_NAME, g.IMAGE_TAG,
     g.LINKERD_VERSION, g.LOG_LEVEL, g.QUANTITY, g.CIDR_LIST],
)  # fmt: skip
def test_a_pattern_is_anchored_for_re2_and_python_alike(grammar: g.Grammar) -> None:
    """The schema's pattern is matched whole by both: ``^...$`` (RE2 has no end-before-newline
    ``$``), and Python drops the anchors for ``fullmatch``."""
    assert grammar.pattern is not None
    assert grammar.pattern.startswith("^") and grammar.pattern.endswith("$")
    assert grammar.problems(f"{grammar.example}\n") != []


def test_exactness_names_what_else_refuses() -> None:
    assert g.PORT.exact and g.IMAGE_NAME.exact and g.LOG_LEVEL.exact
    assert not g.DURATION.exact  # positive, in range
    assert not g.IGNORED_PORTS.exact  # ranges, repeats
    assert not g.PEM_BUNDLE.exact and g.PEM_BUNDLE.more
    assert not g.LINKERD_VERSION.exact and g.LINKERD_VERSION.more
    free = g.free_object("anything", {"a": "b"})
    assert not free.exact  # control characters in its keys and strings
    assert free.problems({"a\x05": 1}) != [] and free.problems({"a": "b"}) == []
