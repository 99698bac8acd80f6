"""``kubectl linkerd-config``'s own part: kubectl's flags in, the command's out, and cobra's
completion protocol (tests/integration/test_kubectl_through_kubectl.py runs it through kubectl)."""

from __future__ import annotations

import pytest

from linkerd_config.kubectl_plugin import (
    FILE_COMPLETION,
    NO_FILE_COMPLETION,
    complete,
    completions,
    main,
    translate,
)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["status", "-n", "mesh"], ["status", "--config-namespace", "mesh"]),
        (["status", "-nmesh"], ["status", "--config-namespace", "mesh"]),
        (["status", "--namespace", "mesh"], ["status", "--config-namespace", "mesh"]),
        (["status", "--namespace=mesh"], ["status", "--config-namespace", "mesh"]),
        (
            ["plan", "-f", "x.yaml", "--context", "kind", "-o", "yaml"],
            ["plan", "-f", "x.yaml", "--context", "kind", "-o", "yaml"],
        ),
        (["status", "--no-such"], ["status", "--no-such"]),  # the command refuses it
    ],
)
def test_kubectls_namespace_flag_names_linkerds_namespace(
    argv: list[str], expected: list[str]
) -> None:
    assert translate(argv) == expected


@pytest.mark.parametrize(
    ("args", "found", "directive"),
    [
        ([""], ["plan", "status", "convert"], NO_FILE_COMPLETION),
        (["st"], ["status"], NO_FILE_COMPLETION),
        (["plan", "-f", ""], [], FILE_COMPLETION),
        (["status", "-o", "j"], ["json"], NO_FILE_COMPLETION),
        (["convert", "-f", "a.yaml", "--to", ""], ["v1alpha2", "v1alpha1"], NO_FILE_COMPLETION),
        (["status", "--c"], ["--context"], NO_FILE_COMPLETION),
        (["convert", "-"], ["-f", "--filename", "--to"], NO_FILE_COMPLETION),
        (["status", ""], [], NO_FILE_COMPLETION),
    ],
)
def test_completions(args: list[str], found: list[str], directive: int) -> None:
    assert completions(args) == (found, directive)


def test_completion_speaks_cobras_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    assert complete(["status", "-o", ""]) == 0
    assert capsys.readouterr().out == "text\njson\nyaml\n:4\n"


def test_only_the_inspecting_commands_and_usage_errors_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run"]) == 1  # the controller is not a kubectl plugin's job
    assert "expected one of plan, status, convert, got 'run'" in capsys.readouterr().err
    assert main(["plan"]) == 1  # argparse's 2 would read as "changes"
    assert "-f/--filename" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "-n LINKERD_NAMESPACE" in capsys.readouterr().out
