"""The Django how-to (docs/how-to/django.md): its code is tests/django/project/readme,
included by the page, and works as it says (on the project's default database,
SQLite; tests/django/test_django_backend.py runs the rest on both)."""

from __future__ import annotations

from pathlib import Path

from django.tasks import TaskResultStatus
from django.test import Client
from readme.tasks import report, send_welcome

from conftest import PROJECT

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "django.md"


def test_readme_code_is_the_project_code() -> None:
    page = PAGE.read_text()
    for name in ("tasks.py", "views.py"):
        assert f'--8<-- "tests/django/project/readme/{name}"' in page, name
        assert (PROJECT / "readme" / name).is_file()
    settings = (PROJECT / "testproject" / "settings.py").read_text()
    assert '"BACKEND": "tether.contrib.django.TetherBackend"' in page and "tether.contrib.django" in settings


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
