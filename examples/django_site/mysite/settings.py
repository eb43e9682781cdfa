"""Settings of the example site: just enough Django, plus the SHARDCRON block."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "shardcron.integrations.django",  # the shardcron_run management command
    "shop",
]
ROOT_URLCONF = "mysite.urls"
WSGI_APPLICATION = "mysite.wsgi.application"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
USE_TZ = True

SHARDCRON = {
    "CONFIG": os.environ.get("SHARDCRON_CONFIG", BASE_DIR / "jobs.yaml"),
    "REGISTRY": None,  # None: $SHARDCRON_REGISTRY, else the config file's registry block
}

LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"shardcron": {"handlers": ["console"], "level": "INFO"}},
}
