from typer.testing import CliRunner

from ratchet.cli import app

runner = CliRunner()


def test_serve_refuses_what_it_cannot_serve_with_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("RATCHET_TEST_KEY", raising=False)
    cases = [
        (["serve", str(tmp_path / "nope")], "is not base, oracle, null or a directory"),
        (["serve", "oracle"], "is a scripted agent"),
        (["serve", "base", "--model", "fake", "--api-key-env", "RATCHET_TEST_KEY"], "not set"),
        (["serve", "base", "--model", "fake", "--port", "0"], "--port must be in 1..65535"),
    ]
    for arguments, expected in cases:
        result = runner.invoke(app, arguments)
        assert result.exit_code == 2, result.output
        output = " ".join(result.output.split())
        assert expected in output and "Traceback" not in output
