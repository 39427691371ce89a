"""What every ``jupyter suspend`` command shares: ``--json``, exit codes, usage errors.

Exit codes are the same for every command:

* :data:`EXIT_OK` (0) -- done, and the outcome is the one asked for;
* :data:`EXIT_FAILED` (1) -- the command ran but the outcome is a failure
  (a resume that failed or timed out, a release check that would lose live state);
* :data:`EXIT_USAGE` (2) -- bad arguments: nothing was done;
* :data:`EXIT_NO_CREDENTIALS` (3) -- the command needs the Kubernetes API and found no credentials
  (no kubeconfig, no service account): nothing was done. Not a usage error: the same arguments work
  where credentials exist (``status``, ``resume`` and ``snapshots list`` with ``--url`` need none).

With ``--json`` a command prints exactly one JSON document on stdout, valid
against its schema ``jupyter_suspend/common/schemas/cli-<schema_name>.json``;
progress and errors go to stderr.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import Any, ClassVar, NoReturn

from jupyter_core.application import JupyterApp
from traitlets import Bool, TraitError, Unicode
from traitlets.config import Config

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_CREDENTIALS = 3

BASE_FLAGS: dict[str, Any] = {
    "json": ({"CommandApp": {"json_output": True}}, "Print one JSON document (schema: cli-<command>.json)."),
    "debug": ({"Application": {"log_level": 10}}, "Log at DEBUG level."),
}


class UsageError(ValueError):
    """Bad arguments: reported on stderr and exit code 2, nothing done."""


class NoCredentials(Exception):
    """No Kubernetes credentials were found: reported on stderr and exit code 3, nothing done."""


class CommandApp(JupyterApp):
    """Base of every leaf command: parses, runs :meth:`run`, prints, exits with a meaningful code."""

    #: The name of the command's output schema (``cli-<schema_name>.json``); ``""`` when it prints no JSON.
    schema_name: ClassVar[str] = ""

    json_output = Bool(False, help="Print one JSON document on stdout instead of text.").tag(config=True)

    flags = BASE_FLAGS
    aliases: dict[Any, Any] = {}

    # Jupyter applications read config files; a command of ours reads none unless asked.
    config_file_name = Unicode("jupyter_suspend_config")

    _initializing = False

    def initialize(self, argv: Any = None) -> None:
        self._initializing = True
        try:
            super().initialize(argv)
        finally:
            self._initializing = False

    def _load_config(self, cfg: Config, section_names: list[str] | None = None, traits: Any = None) -> None:
        # A value of the wrong type is a usage error said as one (exit 2, the option named), not
        # traitlets' "CRITICAL | Bad config encountered during initialization".
        try:
            super()._load_config(cfg, section_names, traits)
        except TraitError as exc:
            match = re.search(r"The '(\w+)' trait of an? \w+ instance (.*)", str(exc))
            self.usage_error(f"--{match.group(1).replace('_', '-')}: {match.group(2)}" if match else str(exc))

    def exit(self, exit_status: int | str | None = 0) -> None:
        # traitlets reports unknown flags and bad trait values with exit status 1; for us that is a usage error.
        if self._initializing and exit_status == 1:
            exit_status = EXIT_USAGE
        super().exit(exit_status)

    def usage_error(self, message: str) -> NoReturn:
        print(f"jupyter {self.name}: error: {message}", file=sys.stderr)
        print(f"(see: jupyter {self.name} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def start(self) -> None:
        if self.subapp is not None:  # a group command dispatching to a leaf
            self.subapp.start()
            return
        try:
            code = self.run()
        except UsageError as exc:
            self.usage_error(str(exc))
        except NoCredentials as exc:
            print(f"jupyter {self.name}: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_NO_CREDENTIALS) from None
        self.exit(code)

    def run(self) -> int:
        """Do the work; return the exit code. Raise :class:`UsageError` for bad arguments."""
        raise NotImplementedError

    def emit(self, result: Mapping[str, Any], text: str) -> None:
        """Print ``result`` as JSON with ``--json``, else ``text``."""
        if self.json_output:
            json.dump(result, sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()

    def positional(self, count: int, names: str) -> list[str]:
        """Exactly ``count`` positional arguments, or a usage error naming them."""
        if len(self.extra_args) != count:
            raise UsageError(f"expected {names}, got {len(self.extra_args)} argument(s): {' '.join(self.extra_args)}")
        return list(self.extra_args)


class GroupApp(CommandApp):
    """A command made of subcommands (``jupyter suspend snapshots list``): a missing or unknown one is a usage error."""

    def start(self) -> None:
        if self.subapp is not None:
            self.subapp.start()
            return
        if self.extra_args:
            self.usage_error(f"unknown command {self.extra_args[0]!r} (one of: {', '.join(sorted(self.subcommands))})")
        self.usage_error(f"a command is needed (one of: {', '.join(sorted(self.subcommands))})")
