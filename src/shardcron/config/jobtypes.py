"""Job types and the fixed names a job's settings use: the built-in sharding strategies,
thread-pool types and error handlers (with Java's defaults), the HTTP methods of HTTP jobs, the
``props`` keys shardcron reserves, and the thread-pool key's two names across Java versions.
"""

from __future__ import annotations

import enum

PROP_PREFIX = "shardcron."
TYPE_PROP = PROP_PREFIX + "type"
CALLABLE_PROP = PROP_PREFIX + "callable"

DEFAULT_SHARDING_STRATEGY = "AVG_ALLOCATION"
DEFAULT_EXECUTOR_SERVICE_HANDLER = "CPU"
DEFAULT_ERROR_HANDLER = "LOG"
# RENDEZVOUS is shardcron's own: a Java worker cannot lead a job that uses it.
SHARDING_STRATEGIES = (
    "AVG_ALLOCATION",
    "ODEVITY",
    "ROUND_ROBIN",
    "SINGLE_SHARDING_BALANCE",
    "RENDEZVOUS",
)
EXECUTOR_SERVICE_HANDLERS = ("CPU", "SINGLE_THREAD")
ERROR_HANDLERS = ("LOG", "THROW", "IGNORE", "WEBHOOK", "EMAIL", "WECHAT", "DINGTALK")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE")

# Java <= 3.0.4 reads the first name, 3.0.5+ only the second; each rejects the other.
EXECUTOR_KEY = "jobExecutorServiceHandlerType"
EXECUTOR_KEY_305 = "jobExecutorThreadPoolSizeProviderType"


class JobType(enum.StrEnum):
    SIMPLE = "SIMPLE"
    DATAFLOW = "DATAFLOW"
    SCRIPT = "SCRIPT"
    HTTP = "HTTP"
