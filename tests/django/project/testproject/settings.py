"""A Django project whose tasks run on tether: the SQLite file and the
PostgreSQL database come from the environment the test session sets
(tests/django/conftest.py), so that manage.py subprocesses see them too."""

import os

SECRET_KEY = "tether-tests"
DEBUG = os.environ.get("TETHER_DJANGO_DEBUG") == "1"  # startproject's True: Django's console log handler
ALLOWED_HOSTS = ["*"]
if os.environ.get("TETHER_DJANGO_ROOT_LOG") == "1":  # a project whose LOGGING gives the root logger a handler
    LOGGING = {"version": 1, "disable_existing_loggers": False,
               "formatters": {"own": {"format": "OWN %(name)s: %(message)s"}},
               "handlers": {"own": {"class": "logging.StreamHandler", "formatter": "own"}},
               "root": {"handlers": ["own"], "level": "INFO"}}
USE_TZ = True
ROOT_URLCONF = "testproject.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "tether.contrib.django", "shop", "readme"]

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["TETHER_DJANGO_SQLITE"]},
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["TETHER_DJANGO_PG_NAME"],
        "HOST": os.environ.get("TETHER_DJANGO_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("TETHER_DJANGO_PG_PORT", "5432"),
        "USER": os.environ.get("TETHER_DJANGO_PG_USER", "postgres"),
        "PASSWORD": os.environ.get("TETHER_DJANGO_PG_PASSWORD", ""),
    },
}

QUEUES = ["default", "emails", "prio", "later", "kill", "retry", "docs", "callcmd", "tx", "coop"]
# short timers, so that a killed worker's job comes back within seconds
TIMERS = {"lease_ttl": 2, "heartbeat_interval": 0.5, "reaper_interval": 0.5}

TASKS = {
    "default": {"BACKEND": "tether.contrib.django.TetherBackend", "QUEUES": QUEUES, "OPTIONS": TIMERS},
    "pg": {"BACKEND": "tether.contrib.django.TetherBackend", "QUEUES": QUEUES,
           "OPTIONS": {"database": "pg", **TIMERS,
                       "task_options": {"shop.tasks.configured": {"max_attempts": 1}}}},
}

MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
