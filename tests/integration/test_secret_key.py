"""Outside DEBUG the production settings refuse to start without a SECRET_KEY, with a clear message."""

import os
import subprocess
import sys

import pytest

from tests.support.live import ROOT

IMPORT = "import thinkproject.settings as s; print(s.SECRET_KEY)"


def settings_with(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    return subprocess.run([sys.executable, "-c", IMPORT], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, check=False, timeout=60)


def test_no_secret_key_outside_debug_refuses_to_start(tmp_path):
    result = settings_with(VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set. Set it in the environment" in result.stderr


@pytest.mark.parametrize(("env", "key"), [
    ({"SECRET_KEY": "k" * 50}, "k" * 50),
    ({"DEBUG": "1"}, f"dev-insecure-{ROOT}"),
])
def test_a_real_key_or_debug_starts(tmp_path, env, key):
    result = settings_with(VAR_DIR=str(tmp_path), **env)
    assert (result.returncode, result.stdout.strip()) == (0, key), result.stderr
