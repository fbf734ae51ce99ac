"""``edgeserve tui`` on the command line: one source, clear messages for what does not fit."""

from __future__ import annotations

import pytest

from edgeserve.cli.main import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        rc = main(["tui", *argv])
    except SystemExit as e:  # argparse
        rc = int(e.code or 0)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "one of the arguments --connect --sim --replay is required"),
        (["--sim", "--replay", "x"], "not allowed with argument"),
        (["--replay", "missing.jsonl"], "trace not found: missing.jsonl"),
        (["--replay", "x", "--policy", "always_local"], "--policy applies to --sim only"),
        (["--connect", "http://h:1", "--speed", "2"], "a live server runs at its own pace"),
        (["--connect", "localhost:8000"], "wants an http:// or https:// URL"),
        (["--sim", "no-such-scenario"], "cannot load scenario 'no-such-scenario'"),
        (["--sim", "--set", "duration_s=-1"], "duration_s: must be > 0"),
        (["--replay", "x", "--refresh", "0"], "must be > 0"),
    ],
)
def test_bad_invocations_are_one_line_messages(argv, message, capsys):
    rc, err = run(argv, capsys)
    assert rc == 2 and message in err and "Traceback" not in err


def test_help_names_the_three_sources_and_the_keys(capsys):
    with pytest.raises(SystemExit):
        main(["tui", "--help"])
    out = capsys.readouterr().out
    for text in (
        "--connect URL",
        "--sim [SCENARIO]",
        "--replay TRACE",
        "stock vLLM",
        "q quit",
        "+ - speed",
        "o policy",
    ):
        assert text in out
