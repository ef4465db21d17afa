"""Passwords never echoed (issue 41, item 7): in every form a database URL
can carry one, through the real ``tether`` command, the password is masked in
its error message."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tether.config import redact_text, redact_url

PW = "SuperSecretPW"

FORMS = {
    "libpq keywords": f"host=127.0.0.1 port=1 password={PW} dbname=db",
    "libpq keywords, quoted": f"host=127.0.0.1 port=1 password='{PW} and more' dbname=db",
    "libpq keywords, spaced =": f"host=127.0.0.1 password = {PW} dbname=db",
    "libpq keywords, escaped quote": f"host=127.0.0.1 password='{PW}\\' x' dbname=db",
    "URL password with spaces": f"postgresql://u:Super Secret PW {PW}@127.0.0.1:1/db",
    "URL password with spaces, no path": f"postgresql://u:Super Secret {PW}@127.0.0.1:1",
    "URL password": f"postgresql://u:{PW}@127.0.0.1:1/db",
    "URL password option": f"postgresql://u@127.0.0.1:1/db?password={PW}",
    "keyword in a URL query": f"postgresql:///db?host=127.0.0.1&port=1&password={PW}",
}


@pytest.mark.parametrize("dsn", FORMS.values(), ids=FORMS.keys())
def test_the_cli_never_prints_the_password(dsn: str) -> None:
    env = {**os.environ, "PGCONNECT_TIMEOUT": "3"}
    env.pop("TETHER_DATABASE_URL", None)
    proc = subprocess.run([sys.executable, "-m", "tether", "-d", dsn, "status"], capture_output=True, text=True,
                          timeout=60, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and out.strip(), out
    assert PW not in out and "Secret" not in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("dsn", FORMS.values(), ids=FORMS.keys())
def test_redaction_masks_each_form(dsn: str) -> None:
    assert PW not in redact_url(dsn)
    assert PW not in redact_text(f'the driver said: "{dsn}"', dsn)


def test_a_driver_quoting_the_password_alone_is_masked() -> None:
    for dsn, password in [(f"host=h password='{PW} x' dbname=db", f"{PW} x"),
                          (f"postgresql://u:Super Secret {PW}@h/db", f"Super Secret {PW}"),
                          (f"host=h password={PW}", PW)]:
        assert PW not in redact_text(f'unexpected spaces found in "{password}"', dsn)


def test_redaction_leaves_ordinary_text_alone() -> None:
    text = 'password authentication failed for user "u" at postgresql://u:***@h/db'
    assert redact_url(text) == text
    assert redact_url("postgresql://u@h:5432/db") == "postgresql://u@h:5432/db"
