"""``edgeserve bench``: user errors are one clear line and exit code 2, never a traceback."""

from __future__ import annotations

import pytest

from edgeserve.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--url", "http://127.0.0.1:9", "--num-prompts", "1"], "cannot reach"),
        (["run", "--url", "localhost:8000"], "must start with http"),
        (["run", "--url", "http://h", "--images", "huge"], "bad image size"),
        (["run", "--url", "http://h", "--duration", "5"], "finite request rate"),
        (["run", "--url", "http://h", "--goodput", "ttft:x"], "bad SLO"),
        (["sweep", "--url", "http://h", "--rates", "4,2"], "must increase"),
        (["run", "--url", "http://h", "--dataset", "sharegpt"], "needs --dataset-path"),
        (["run", "--url", "http://h", "--dataset", "chat", "--chat-prompt-len", "big"],
         "bad length distribution"),
        (["run", "--url", "http://h", "--dataset", "prefix-repetition",
          "--prefix-repetition-num-prefixes", "0"], "at least 1 distinct prefix"),
        (["compare", "--servers", "tgi"], "unknown server"),
    ],
)
def test_user_errors_are_clear_messages(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *argv, "--no-progress"] if argv[0] != "compare" else ["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bench_preproc_hands_every_argument_to_the_preprocessing_benchmark(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "preproc", "--help"]) == 0
    out = capfd.readouterr().out
    assert "usage: preproc.py" in out and "--rounds" in out
