"""WSGI entry point. The scheduler is not started here but in gunicorn's post_fork hook
(gunicorn_conf.py), which also works with --preload."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
application = get_wsgi_application()
