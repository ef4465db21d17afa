"""tether's tables, through tether's own migrations (``tether migrate``), on
the database the migration runs on, for every TetherBackend whose jobs live
there. Not atomic: tether migrates on its own connection and commits."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def create_tables(apps: Any, schema_editor: Any) -> None:
    from tether.contrib.django.backend import migrate_database

    migrate_database(schema_editor.connection.alias)


class Migration(migrations.Migration):
    atomic = False
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [migrations.RunPython(create_tables, migrations.RunPython.noop, elidable=False)]
