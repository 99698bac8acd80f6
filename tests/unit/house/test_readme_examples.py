"""Every LinkerdConfig the README and the docs show is one the webhook's validation admits."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from linkerd_config.linkerd.admission.validation import validate

ROOT = Path(__file__).resolve().parents[3]
README = "\n".join(
    path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
)
EXAMPLES = [
    textwrap.dedent(block)
    for indent, block in re.findall(r"^( *)```yaml\n(.*?)^\1```", README, re.S | re.M)
    if "kind: LinkerdConfig" in block
]


def test_the_readme_shows_linkerdconfigs() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("text", EXAMPLES, ids=range(len(EXAMPLES)))
def test_each_is_valid(text: str) -> None:
    obj = yaml.safe_load(text)
    assert validate(obj) == [], text
