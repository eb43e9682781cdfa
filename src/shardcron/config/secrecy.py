"""Secrets stay on the worker: references in the registry, redaction everywhere text leaves.

A secret setting (a prop whose name ends in password, secret, token or key, or a URL
carrying a password or a credential query parameter) is stored in the registry only as a
reference, ``${SMTP_PASSWORD}``. The worker that uses it resolves the reference from its
own ``worker.secrets`` block, else from its environment; a literal secret is a config
error, so it is never written where anyone who reads the registry could see it.

Redaction is the second line, for values written before (or by Java): the console, the
dump service, ``shardcron dump``, logs and trace rows show ``***`` instead of a secret.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from urllib.parse import parse_qsl, urlsplit

from shardcron.errors import ConfigError

REDACTED = "***"
# shardcron's own variables that carry credentials: never passed on to SCRIPT children.
CREDENTIAL_ENV = (
    "SHARDCRON_REGISTRY",
    "SHARDCRON_CONSOLE_ADMIN",
    "SHARDCRON_CONSOLE_GUEST",
    "SHARDCRON_CONSOLE_SECRET",
)
_SECRET_ENDINGS = ("password", "passwd", "pwd", "secret", "token", "key", "credential")
_SECRET_QUERY = frozenset(("sig", "sign", "signature", "auth", "code", "access_token", "api_key"))
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>|]+")
# `key: value` (YAML) or `key=value` (a props text) on one line.
_KEY_VALUE = re.compile(r"(?m)^(\s*['\"]?([\w.\-]+)['\"]?\s*[:=][ \t]*)(\S.*?)\s*$")

_local: dict[str, str] = {}
_lock = threading.Lock()


def is_secret_key(key: str) -> bool:
    """A prop name that holds a secret: its last dotted part ends in password, token, ..."""
    last = key.rsplit(".", 1)[-1].lower()
    return last.endswith(_SECRET_ENDINGS)


def is_reference(value: str) -> bool:
    return _REFERENCE.fullmatch(value.strip()) is not None


def _secret_query_name(name: str) -> bool:
    return name.lower() in _SECRET_QUERY or is_secret_key(name)


def url_has_credentials(value: str) -> bool:
    """True when a URL in ``value`` carries a literal password or credential parameter."""
    for match in _URL.finditer(value):
        parts = urlsplit(match.group(0))
        if parts.password and not is_reference(parts.password):
            return True
        for name, item in parse_qsl(parts.query, keep_blank_values=True):
            if _secret_query_name(name) and item and not is_reference(item):
                return True
    return False


def literal_secret_problems(props: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """``(field, problem)`` for each prop holding a literal secret instead of a reference."""
    for key, value in props.items():
        if not value.strip() or is_reference(value):
            continue
        if is_secret_key(key) or url_has_credentials(value):
            name = re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_").upper()
            yield (
                f"props.{key}",
                "a secret must not be stored in the registry; write ${" + name + "} and set "
                f"{name} in the worker's environment (or its worker.secrets block)",
            )


# -- resolving references (on the worker only) ----------------------------------------------


def set_local_secrets(values: Mapping[str, str]) -> None:
    """The local config file's ``worker.secrets``: consulted before the environment."""
    with _lock:
        _local.update(values)


def resolve(value: str, field: str, job: str | None = None) -> str:
    """``value`` with each ``${NAME}`` replaced by the worker's secret of that name."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        with _lock:
            found = _local.get(name)
        found = found if found is not None else os.environ.get(name)
        if found is None:
            raise ConfigError(
                field,
                f"${{{name}}} is not set on this worker; export {name}=... or add it to "
                "the worker.secrets block of the config file",
                job=job,
            )
        return found

    return _REFERENCE.sub(one, value)


def resolve_props(props: Mapping[str, str], job: str | None) -> dict[str, str]:
    return {key: resolve(value, f"props.{key}", job) for key, value in props.items()}


def child_environment() -> dict[str, str]:
    """The worker's environment minus shardcron's own credential variables."""
    return {name: value for name, value in os.environ.items() if name not in CREDENTIAL_ENV}


# -- redaction -------------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """``url`` without its password and credential query values."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password and not is_reference(password):
        url = url.replace(f":{password}@", f":{REDACTED}@", 1)
    if not parts.query:
        return url

    def value(match: re.Match[str]) -> str:
        name, item = match.group(1), match.group(2)
        if _secret_query_name(name) and item and not is_reference(item):
            return f"{name}={REDACTED}"
        return match.group(0)

    head, _, query = url.partition("?")
    return f"{head}?{re.sub(r'([^&=#]+)=([^&#]*)', value, query)}"


def redact_text(text: str) -> str:
    """``text`` with secret-named values (``key: v``, ``key=v``) and URL secrets as ``***``."""

    def line(match: re.Match[str]) -> str:
        head, key, value = match.group(1), match.group(2), match.group(3)
        if is_secret_key(key) and not is_reference(value.strip("'\"")):
            return f"{head}{REDACTED}"
        return match.group(0)

    text = _KEY_VALUE.sub(line, text)
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def redact_props(props: Mapping[str, str]) -> dict[str, str]:
    return {
        key: REDACTED
        if is_secret_key(key) and value and not is_reference(value)
        else redact_text(value)
        for key, value in props.items()
    }


class RedactingFilter(logging.Filter):
    """A handler filter: each record's message redacted as :func:`redact_text` does, so a
    secret in an error's text (a URL, a legacy prop) never reaches a log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True
