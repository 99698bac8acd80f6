"""What Linkerd reads is what was stated (issue 39, finding 2): every string the values format
writes is read back as the same string by Linkerd's own reader, edge-26.8.3's
``l5dcharts.Values`` through ``sigs.k8s.io/yaml`` (``strict-values``, built in its vendored
tree, as ``test_every_injector_value`` runs it). Before, ``identityTrustDomain: 1e3`` was
written plain and read "1000", ``proxy.image.name: 0o17`` read "15".

Hypothesis draws strings a YAML reader may take for something else (YAML 1.1 and 1.2
numbers, exponents, octal/hex/binary forms, booleans, nulls, timestamps, base 60) and any
text, places them in string fields of ``values`` and writes them with the format's own
writer (``dump_values``). The legacy format writes protobuf-JSON, where every string is
quoted: nothing there for a YAML reader to take otherwise.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster.linkerd_binaries import ensure_linkerd
from linkerd_config.linkerd.formats.helm_values import dump_values

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FIELDS = (("identityTrustDomain",), ("clusterDomain",), ("clusterNetworks",),
          ("controllerImage",), ("proxy", "image", "name"), ("proxy", "image", "version"),
          ("proxy", "logLevel"), ("proxy", "logFormat"))  # fmt: skip
"""String fields of ``l5dcharts.Values`` (each read into a Go string)."""

AMBIGUOUS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.sampled_from(["1e3", "1E3", "+1e3", "-1e-3", "1e+3", "0o17", "0O17", "0x1F", "0b101",
                     "017", "1_000", "1:30", "190:20:30", ".5", "5.", "+.5", ".inf", "-.Inf",
                     ".NaN", "1.0", "6.8523015e+5", "yes", "No", "on", "OFF", "y", "n",
                     "true", "False", "null", "~", "Null", "2001-12-14", "2001-12-14t21:59:43",
                     "2001-12-14 21:59:43.10 -5", "<<", "=", "0", "-0", "00", "1.2.3"]),
    st.from_regex(r"[-+]?[0-9]{1,4}(\.[0-9]{0,3})?([eE][-+]?[0-9]{1,2})?", fullmatch=True),
    st.from_regex(r"[-+]?0[oxb][0-9a-f_]{1,6}", fullmatch=True),
    st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=12),
)  # fmt: skip


def stated(path: tuple[str, ...], value: str) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return root


def read_back(reader: Path, folder: Path, text: str, path: tuple[str, ...]) -> Any:
    file = folder / "values.yaml"
    file.write_text(text)
    done = subprocess.run(
        [str(reader), str(file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (text, done.stderr)
    # Linkerd's Go writes back what it read; read every scalar of that as text (BaseLoader):
    # the question is which string Linkerd holds, not what PyYAML would make of it.
    node: Any = yaml.load(done.stdout, Loader=yaml.BaseLoader)
    for key in path:
        node = node[key]
    return node


@pytest.fixture(scope="module")
def reader() -> Path:
    return ensure_linkerd("edge-26.8.3", "strict-values")


def test_every_string_written_is_the_string_linkerd_reads(
    reader: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("values")
    seen: list[tuple[str, str]] = []

    @settings(
        max_examples=150, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )  # fmt: skip
    @given(value=AMBIGUOUS, path=st.sampled_from(FIELDS))
    def one(value: str, path: tuple[str, ...]) -> None:
        text = dump_values(stated(path, value))
        got = read_back(reader, folder, text, path)
        seen.append((value, text))
        assert got == value, f"{'.'.join(path)}: stated {value!r}, written {text!r}, read {got!r}"

    one()
    assert len(seen) >= 100
    assert any(v in ("1e3", "0o17") for v, _ in seen)  # the finding's own cases were tried


@pytest.mark.parametrize(("value", "was"), [("1e3", "1000"), ("0o17", "15")])
def test_the_finding_s_cases(reader: Path, tmp_path: Path, value: str, was: str) -> None:
    """Written plain, Linkerd read these as other strings (the finding): now as stated."""
    plain = f"identityTrustDomain: {value}\n"
    assert read_back(reader, tmp_path, plain, ("identityTrustDomain",)) == was
    ours = dump_values({"identityTrustDomain": value})
    assert read_back(reader, tmp_path, ours, ("identityTrustDomain",)) == value
    assert ours != plain  # written quoted
