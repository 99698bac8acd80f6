"""Linkerd release names (``edge-19.12.3``, ``stable-2.6.1``) as comparable values.

The config format Linkerd reads changed between releases, so every format decision starts
from the target version in ``spec.global.version``. Linkerd ships two channels whose numbers
are unrelated (edge-YY.M.N is a date, stable-X.Y.Z a semantic version), so versions only
compare within a channel; a feature gate names its first release on each channel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import total_ordering
from typing import Literal

__all__ = [
    "Channel",
    "LinkerdVersion",
    "Releases",
    "VersionError",
    "first_of",
    "firsts",
    "parse_version",
    "releases",
]

Channel = Literal["edge", "stable"]

_NUMBER = r"(0|[1-9][0-9]{0,8})"  # nine digits at most: int() stays cheap, never refuses
_EDGE = re.compile(rf"edge-([0-9]{{2}})\.([1-9]|1[0-2])\.{_NUMBER}")
_STABLE = re.compile(rf"stable-{_NUMBER}\.{_NUMBER}\.{_NUMBER}")


class VersionError(ValueError):
    """A string that is not a Linkerd release name."""


@total_ordering
@dataclass(frozen=True, slots=True)
class LinkerdVersion:
    """One Linkerd release: its channel and its three numbers."""

    channel: Channel
    numbers: tuple[int, int, int]

    def __str__(self) -> str:
        return f"{self.channel}-{'.'.join(map(str, self.numbers))}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, LinkerdVersion):
            return NotImplemented
        if other.channel != self.channel:
            raise TypeError(f"cannot order {self} and {other}: different release channels")
        return self.numbers < other.numbers

    def at_least(self, *firsts: LinkerdVersion) -> bool:
        """Whether this release is at or after the first release of its channel in ``firsts``.

        ``v.at_least(parse_version("edge-20.1.1"), parse_version("stable-2.7.0"))`` asks
        "does v have the feature that shipped in edge-20.1.1 and stable-2.7.0?".
        """
        return self >= self.first_in(firsts)

    def first_in(self, firsts: Iterable[LinkerdVersion]) -> LinkerdVersion:
        """The release of this one's channel among ``firsts`` (each names a gate's first)."""
        found = first_of(firsts, self.channel)
        if found is None:
            raise ValueError(f"no first release given for the {self.channel} channel")
        return found


def first_of(releases: Iterable[LinkerdVersion], channel: str) -> LinkerdVersion | None:
    """The release of ``channel`` among ``releases``, or None if that channel has none."""
    return next((release for release in releases if release.channel == channel), None)


def firsts(*names: str) -> tuple[LinkerdVersion, ...]:
    """A gate's first releases, one per channel: ``firsts("stable-2.7.0", "edge-20.1.1")``."""
    return tuple(parse_version(name) for name in names)


def parse_version(text: str) -> LinkerdVersion:
    """Parse ``edge-YY.M.N`` or ``stable-X.Y.Z``; raise VersionError for anything else."""
    if isinstance(text, str):
        if match := _EDGE.fullmatch(text):
            year, month, number = (int(group) for group in match.groups())
            return LinkerdVersion("edge", (year, month, number))
        if match := _STABLE.fullmatch(text):
            major, minor, patch = (int(group) for group in match.groups())
            return LinkerdVersion("stable", (major, minor, patch))
    raise VersionError(
        f"{text!r} is not a Linkerd version: expected edge-YY.M.N (e.g. edge-19.12.3) "
        "or stable-X.Y.Z (e.g. stable-2.6.1)"
    )


@dataclass(frozen=True, slots=True)
class Releases:
    """The releases that have something (a config field, a values key).

    Per channel: from the first release of that channel in ``since`` up to (not including) the
    one in ``until``. A channel missing from ``since`` never has it; one missing from
    ``until`` keeps it.
    """

    since: tuple[LinkerdVersion, ...]
    until: tuple[LinkerdVersion, ...] = ()

    def include(self, version: LinkerdVersion) -> bool:
        first = first_of(self.since, version.channel)
        end = first_of(self.until, version.channel)
        return first is not None and version >= first and (end is None or version < end)

    def requirement(self, version: LinkerdVersion) -> str:
        """Why ``version``, outside these, cannot carry it, naming the first that can."""
        first = first_of(self.since, version.channel)
        if first is None:
            spans = " or ".join(self.span(other) for other in self.since)
            return f"is only in Linkerd {spans}, in no {version.channel} release"
        if first_of(self.until, version.channel) is None:
            return f"needs Linkerd {first} or later"
        return f"is only in Linkerd {self.span(first)}"

    def span(self, first: LinkerdVersion) -> str:
        end = first_of(self.until, first.channel)
        return f"{first} or later" if end is None else f"{first} up to (not including) {end}"

    def describe(self) -> str:
        """For docs: ``edge-20.1.3+, stable-2.7.0+`` or ``edge-20.7.3 - edge-20.8.3``."""
        return ", ".join(self.span(first) for first in self.since)


def releases(*since: str, until: tuple[str, ...] = ()) -> Releases:
    """``releases("edge-20.1.3", "stable-2.7.0")``: from those on (until ``until``)."""
    return Releases(firsts(*since), firsts(*until))
