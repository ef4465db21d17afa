"""The README's "Django" section: its code is tests/django/project/readme,
byte for byte, and works as it says (on the project's default database,
SQLite; tests/django/test_django_backend.py runs the rest on both)."""

from __future__ import annotations

import re
from pathlib import Path

from django.tasks import TaskResultStatus
from django.test import Client
from readme.tasks import report, send_welcome

from conftest import PROJECT

README = Path(__file__).resolve().parents[2] / "README.md"


def _section() -> str:
    text = README.read_text()
    start = text.index("## Django\n")
    return text[start:text.index("\n## ", start + 1)]


def test_readme_code_is_the_project_code() -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section(), re.S)
    for name in ("tasks.py", "views.py"):
        source = (PROJECT / "readme" / name).read_text()
        assert source in blocks, f"README's readme/{name} differs from {PROJECT / 'readme' / name}"
    settings = (PROJECT / "testproject" / "settings.py").read_text()
    assert '"BACKEND": "tether.contrib.django.TetherBackend"' in blocks[0] and "tether.contrib.django" in settings


def test_readme_sign_up_then_status(burst) -> None:
    client = Client()
    result_id = client.post("/signup/", {"email": "new@example.com"}).json()["task"]
    assert client.get(f"/status/{result_id}/").json()["status"] == "READY"
    burst("default", "emails")
    shown = client.get(f"/status/{result_id}/").json()
    assert shown == {"status": "SUCCESSFUL", "attempts": 1, "sent": 1}
    assert send_welcome.get_result(result_id).task.max_attempts == 5


def test_readme_context_task(burst) -> None:
    result = report.enqueue(n=7)
    burst("default", "default")
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "report 7, attempt 1"
