"""No secret in any log line: the sidecar's log filter.

Every record of every logger passes through :data:`REDACTOR` (installed on the
root handlers by :func:`install`): the bearer secret and every service-account
token the sidecar has read are replaced by ``[redacted]``, control characters
are escaped (a request cannot forge log lines), and the HTTP layer's
"malformed request" line, which would quote the offending header line whole
(a secret split by a control character would not be recognised), is replaced
by a line that quotes nothing.
"""

from __future__ import annotations

import logging
import re
import threading

#: Shorter values are not secrets we hold (and would redact ordinary words).
MIN_SECRET_CHARS = 16
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


class Redactor(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._secrets: frozenset[str] = frozenset()

    def add(self, secret: str | bytes) -> None:
        value = secret.decode("utf-8", "replace") if isinstance(secret, bytes) else secret
        value = value.strip()
        if len(value) >= MIN_SECRET_CHARS:
            with self._lock:
                self._secrets = self._secrets | {value}

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return _CONTROL.sub(_escape, text)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "tornado.general" and str(record.msg).startswith("Malformed HTTP message"):
            record.msg, record.args = "a malformed HTTP request was refused (not quoted: it may hold the secret)", None
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # a bad format string must not drop the line
            message = f"{record.msg!r} {record.args!r}"
        record.msg, record.args = self.redact(message), None
        if record.exc_info:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


REDACTOR = Redactor()


def install(logger: logging.Logger | None = None) -> None:
    """Put :data:`REDACTOR` on every handler of ``logger`` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if REDACTOR not in handler.filters:
            handler.addFilter(REDACTOR)
