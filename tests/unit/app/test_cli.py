"""The command line behaves as users of controller-runtime tools expect, and says what is
wrong in words, not Python's."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from devcluster import service
from devcluster.__main__ import build_parser as dev_cluster_parser
from linkerd_config.cli import build_parser, main
from linkerd_config.settings import SettingsError, parse

KUBECONFIG = ["--kubeconfig", "/dev/null"]


def test_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("linkerd-config ") and out.strip() != "linkerd-config"


def test_a_bare_switch_means_true_and_false_still_works() -> None:
    assert parse([*KUBECONFIG, "--leader-elect"], env={}).leader_elect is True
    assert parse([*KUBECONFIG, "--leader-elect", "false"], env={}).leader_elect is False
    assert parse([*KUBECONFIG, "--enable-webhooks"], env={}).enable_webhooks is True


def test_zero_disables_the_metrics_endpoint() -> None:
    assert parse([*KUBECONFIG, "--metrics-bind-address", "0"], env={}).metrics_address[1] == 0
    assert parse([*KUBECONFIG, "--metrics-bind-address", ":0"], env={}).metrics_address[1] == 0


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--workers", "x"], {}, "--workers = 'x': it must be a whole number"),
        ([], {"WORKERS": "x"}, "--workers (from $WORKERS) = 'x': it must be a whole number"),
        (["--metrics-bind-address", ":http"], {}, "the port must be a whole number"),
        (["--leader-elect-lease-duration", "soon"], {}, "expected a number of seconds"),
    ],
)
def test_errors_are_words_not_python(argv: list[str], env: dict[str, str], expected: str) -> None:
    with pytest.raises(SettingsError) as refused:
        parse([*KUBECONFIG, *argv], env=env)
    message = str(refused.value)
    assert expected in message
    assert "invalid literal" not in message and "could not convert" not in message
    assert message.count("--workers") <= 1 and message.count("--metrics") <= 1


def test_dev_cluster_help_says_what_each_action_does() -> None:
    text = dev_cluster_parser().format_help()
    for action, words in (
        ("up", "start it"),
        ("status", "print its state"),
        ("env", "print only the exports"),
        ("down", "remove every file"),
    ):
        assert f"  {action}" in text and words in text, (action, text)


def test_make_help_lists_every_dev_cluster_target() -> None:
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        ["make", "-s", "help"], cwd=root, capture_output=True, text=True, check=True, timeout=60
    )
    for target in ("dev-cluster-up", "dev-cluster-down", "dev-cluster-status"):
        assert target in done.stdout, done.stdout


def test_down_leaves_no_files_behind(tmp_path: Path) -> None:
    state = tmp_path / "dev-cluster"
    state.mkdir()
    for name in ("state.json", "kubeconfig", "supervisor.log"):
        (state / name).write_text('{"supervisor_pid": 999999999}' if name == "state.json" else "x")
    assert service.down(state) is False  # nothing running: just the leftovers to clean
    assert not state.exists()


def test_the_product_command_lists_no_development_command() -> None:
    """The local control plane is ``python -m devcluster``, never the product's CLI."""
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == {"run", "plan", "status", "convert", "check", "_extension-metadata"}
    assert "dev-cluster" not in build_parser().format_help()


def test_the_module_entry_point_is_the_same_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "linkerd_config", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("linkerd-config "), done


def test_plan_and_status_say_what_is_wrong_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKERS", "not a number")  # a `run` setting these commands do not take
    monkeypatch.setattr("linkerd_config.logs.configure_logging", lambda *_: None)  # global
    assert main(["plan", "-f", "x.yaml", "--restart-interval", "soon"]) == 1
    assert "--restart-interval = 'soon'" in capsys.readouterr().err
    assert main(["plan", "-f", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 1
    assert "cannot reach the API server at https://127.0.0.1:9" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["plan"], ["status", "--bogus"], ["plan", "-f", "x", "-o", "xml"], ["nope"], []],
    ids=["plan-without-f", "unknown-flag", "bad-output", "unknown-command", "no-command"],
)
def test_a_usage_error_exits_1_not_2_which_means_changes(argv: list[str]) -> None:
    """Issue 39, finding 6: argparse's 2 read as "changes" in a pipeline."""
    done = subprocess.run(
        [sys.executable, "-m", "linkerd_config", *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert "error:" in done.stderr and done.stdout == ""


async def test_a_huge_kubeconfig_is_refused_unread(tmp_path: Path) -> None:
    """Issue 39, finding 6: 300 MB took a minute and 659 MB to parse; over 16 MiB is refused
    at once, naming the file."""
    from linkerd_config.kube.kubeconfig import (  # noqa: PLC0415
        MAX_KUBECONFIG_BYTES,
        AccessError,
        load_access,
    )

    huge = tmp_path / "kubeconfig"
    with huge.open("wb") as handle:
        handle.write(b"apiVersion: v1\n# ")
        handle.truncate(MAX_KUBECONFIG_BYTES + 1)  # sparse: nothing to read but the refusal
    with pytest.raises(AccessError, match=f"kubeconfig {huge} is larger than 16 MiB"):
        await load_access(str(huge), None)
