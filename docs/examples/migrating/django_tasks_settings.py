# django-tasks' side of docs/migrating/django-tasks.md: a project's TASKS
# setting, before and after. Compiled by tests/test_docs_migrating.py (and
# the tether entry is the one tests/django/project runs).
# --8<-- [start:before]
TASKS = {"default": {"BACKEND": "django_tasks.backends.database.DatabaseBackend", "QUEUES": ["default", "emails"]}}
# --8<-- [end:before]
# --8<-- [start:after]
TASKS = {"default": {"BACKEND": "tether.contrib.django.TetherBackend", "QUEUES": ["default", "emails"]}}
# --8<-- [end:after]
