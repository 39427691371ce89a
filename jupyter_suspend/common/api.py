"""The REST API's address, shared by the server, the kernel-side client and (by hand) ``src/request.ts``."""

from __future__ import annotations

#: Every endpoint lives under ``{base_url}`` + this prefix (a test keeps ``src/request.ts`` equal to it).
API_PREFIX = "jupyter-suspend/api"
