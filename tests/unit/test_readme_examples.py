"""Every LinkerdConfig the README shows is one the webhook's validation admits."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from linkerd_config.linkerd.validation import validate

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
EXAMPLES = [
    textwrap.dedent(block)
    for indent, block in re.findall(r"^( *)```yaml\n(.*?)^\1```", README, re.S | re.M)
    if "kind: LinkerdConfig" in block
]


def test_the_readme_shows_linkerdconfigs() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("text", EXAMPLES, ids=range(len(EXAMPLES)))
def test_each_is_valid(text: str) -> None:
    obj = yaml.safe_load(text)
    assert validate(obj) == [], text
