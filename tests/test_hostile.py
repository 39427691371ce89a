"""Hostile input over the REST API of a real (in-process) server.

First the regressions of issue 8, item 10 (each reproduced before its fix),
then a property-based suite (hypothesis): every endpoint, every method,
valid-shaped and hostile bodies, in the running, suspended and failed
states. Whatever comes in: never a 5xx; every 4xx is a JSON ``ErrorAnswer``;
and a 4xx changes nothing (state, operation, journal).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import SuspendClient

POST_ENDPOINTS = ("suspend", "checkpoint", "resume", "acknowledge", "verify", "checkpoint-record")


def journal_lines(state_dir: Path) -> list[str]:
    path = state_dir / "journal.jsonl"
    return path.read_text().splitlines() if path.exists() else []


async def snapshot(api: SuspendClient, state_dir: Path) -> tuple[str, str | None, int]:
    """What a refused request must leave as it was: the state, the operation, the journal."""
    status = await api.status()
    operation = status["operation"]
    return status["state"], operation["id"] if operation else None, len(journal_lines(state_dir))


async def assert_refused(api: SuspendClient, state_dir: Path, endpoint: str, raw: bytes, expect: str) -> None:
    before = await snapshot(api, state_dir)
    response = await api.call("POST", endpoint, raw=raw)
    assert response.code == 400, (endpoint, raw[:80], response.code, response.body[:300])
    message = json.loads(response.body)["message"]
    assert expect in message, message[:300]
    assert await snapshot(api, state_dir) == before


# -- item 10: deep nesting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", POST_ENDPOINTS)
async def test_deeply_nested_body_is_a_400(suspend_api: SuspendClient, state_dir: Path, endpoint: str) -> None:
    deep_list = b"[" * 1000 + b"]" * 1000
    deep_object = b'{"a":' * 1000 + b"1" + b"}" * 1000
    for raw in (
        deep_list,
        deep_object,
        b'{"reason": ' + deep_list + b"}",
        b'{"kernel_id": "k", "names": ' + b"[" * 990 + b"]" * 990 + b"}",
        b"[" * 60000,  # never closed
    ):
        await assert_refused(suspend_api, state_dir, endpoint, raw, "nested")


async def test_error_messages_do_not_echo_huge_values(suspend_api: SuspendClient, state_dir: Path) -> None:
    raw = json.dumps({"reason": ["x" * 50000]}).encode()
    before = await snapshot(suspend_api, state_dir)
    response = await suspend_api.call("POST", "suspend", raw=raw)
    assert response.code == 400
    assert len(json.loads(response.body)["message"]) < 2000
    assert await snapshot(suspend_api, state_dir) == before


async def test_non_finite_numbers_are_a_400(suspend_api: SuspendClient, state_dir: Path) -> None:
    """Python's json reads NaN and Infinity; no JSON client can read them back."""
    raw = b'{"kernel_id": "k", "observed": {"canary_hash": null, "pid": 1, "process_start": Infinity}}'
    await assert_refused(suspend_api, state_dir, "verify", raw, "not valid JSON")


# -- item 10: a trailing newline after an id or a name -----------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"kernel_id": "a\n"},
        {"kernel_id": "k", "names": ["weights\n"]},
        {"kernel_id": "k", "observed": {"canary_hash": "a" * 64 + "\n", "pid": 1}},
        {"kernel_id": "k", "observed": {"canary_hash": None, "pid": 1, "registered": ["x\n"]}},
        {"kernel_id": "k", "observed": {"canary_hash": None, "pid": 1, "restored": ["x\n"]}},
        {"kernel_id": "k", "observed": {"canary_hash": None, "pid": 1, "names": {"x\n": {}}}},
    ],
)
async def test_trailing_newline_is_not_an_id(suspend_api: SuspendClient, state_dir: Path, body: dict) -> None:
    await assert_refused(suspend_api, state_dir, "verify", json.dumps(body).encode(), "does not match")


async def test_trailing_newline_in_a_checkpoint_record(suspend_api: SuspendClient, state_dir: Path) -> None:
    checkpoint = {"checkpoints": [{"name": "w\n"}], "canary": {"hash": "a" * 64, "pid": 1}}
    for body in (
        {"kernel_id": "k\n", "checkpoint": {"checkpoints": [], "canary": {"hash": "a" * 64, "pid": 1}}},
        {"kernel_id": "k", "checkpoint": checkpoint},
    ):
        await assert_refused(suspend_api, state_dir, "checkpoint-record", json.dumps(body).encode(), "does not match")


def test_request_patterns_refuse_a_trailing_newline_everywhere() -> None:
    """Every anchored pattern of every request schema (Python's re.search lets ``$`` match before a final
    newline; the same pattern must hold in ajv, so ``$(?!\\n)``, never ``\\Z``)."""
    import re
    from importlib.resources import files

    from jupyter_suspend.server.validation import SCHEMA_PACKAGE

    def patterns(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
            return found + [p for value in node.values() for p in patterns(value)]
        if isinstance(node, list):
            return [p for value in node for p in patterns(value)]
        return []

    checked = 0
    for resource in files(SCHEMA_PACKAGE).iterdir():
        if not resource.name.endswith("-request.json"):
            continue
        for pattern in patterns(json.loads(resource.read_text())):
            assert "\\Z" not in pattern, (resource.name, pattern)
            if pattern.endswith("$"):
                pytest.fail(f"{resource.name}: {pattern!r} accepts a trailing newline")
            checked += 1
            sample = {"^[0-9a-f]{64}": "a" * 64}.get(pattern.split("$")[0], "a")
            if re.search(pattern, sample):
                assert not re.search(pattern, sample + "\n"), (resource.name, pattern)
    assert checked >= 5


# -- item 10: a client's claim never decides the verdict ---------------------------------------------------------


@pytest.mark.slow
async def test_a_forged_observation_never_journals_live(
    suspend_api: SuspendClient, kernel_server_env: Path, state_dir: Path
) -> None:
    session = await suspend_api.open_notebook("forged.ipynb")
    kernel_id = session["kernel"]["id"]
    reply = await suspend_api.run(kernel_id, "%load_ext jupyter_suspend")
    assert reply["status"] == "ok", reply["stdout"]
    assert (await suspend_api.suspend())["state"] == "suspended"
    assert (await suspend_api.resume())["state"] == "ready"
    await suspend_api.kernel_ready(kernel_id)

    # The server asks the (new, idle) kernel itself: COLD, and what was recorded.
    honest = await suspend_api.json("POST", "verify", {"kernel_id": kernel_id})
    assert honest["verdict"] == "COLD", honest
    recorded = honest["details"]["recorded"]
    new_pid = suspend_api.kernel_pid(kernel_id)
    assert recorded["pid"] != new_pid
    assert recorded["canary_hash"]

    forgeries = [
        # the old process's identity, canary included
        {"canary_hash": recorded["canary_hash"], "pid": recorded["pid"], "process_start": recorded["process_start"]},
        # the old process's pid and start time, no canary
        {"canary_hash": None, "pid": recorded["pid"], "process_start": recorded["process_start"], "helper": False},
        # the real process's pid with the recorded canary
        {"canary_hash": recorded["canary_hash"], "pid": new_pid, "restored": []},
    ]
    for observed in forgeries:
        response = await suspend_api.call("POST", "verify", {"kernel_id": kernel_id, "observed": observed})
        result = json.loads(response.body)
        assert response.code < 500, (observed, response.code, result)
        assert result.get("verdict") != "LIVE", (observed, result)
    entries = [json.loads(line) for line in journal_lines(state_dir)]
    verified = [e for e in entries if e.get("kind") == "verified"]
    assert len(verified) == 1 + len(forgeries), verified
    assert all(e["verdict"] != "LIVE" for e in verified), verified

    # The kernel's own claim (the magic) still reads as it should.
    reply = await suspend_api.run(kernel_id, "%verify_live_state")
    assert "COLD: new kernel process" in reply["displays"][0]["text/plain"], reply


# -- the property-based suite ------------------------------------------------------------------------------------

import asyncio  # noqa: E402 - the suite below is its own part of the file
from collections import Counter  # noqa: E402
from collections.abc import Coroutine  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from jsonschema import Draft202012Validator  # noqa: E402
from tornado.httpclient import HTTPClientError  # noqa: E402

from jupyter_suspend.server import openapi  # noqa: E402
from jupyter_suspend.server.handlers import handlers  # noqa: E402

from .conftest import API  # noqa: E402

#: Every endpoint (as the handlers serve it) and every method a client may send.
ENDPOINTS = sorted(openapi.routes(handlers()))
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
DOCUMENTED = {
    (endpoint, method.upper()) for endpoint, methods in openapi.routes(handlers()).items() for method in methods
}
MAX_BODY_BYTES = 64 * 1024  # SuspendApp.max_body_bytes, the default
#: Examples per (endpoint, method) in each state: the three states together stay well under 90 s on two
#: busy cores. derandomize: the same examples in every run (CI is repeatable); no example database.
POST_EXAMPLES = 15
OTHER_EXAMPLES = 2


def hostile_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def error_validator() -> Draft202012Validator:
    document = openapi._default_document()
    return Draft202012Validator({"$ref": "#/components/schemas/ErrorAnswer", "components": document["components"]})


# Strings a name, an id or a reason should never be trusted with.
TRICKS = [
    "",
    "..",
    "../../etc/passwd",
    "/etc/passwd",
    "a/b",
    "a\\b",
    ".hidden",
    "x\n",
    "x\r\n",
    "\x00",
    "nul\x00byte",
    "é",
    "\u202ertl",
    "a" * 201,
    "k" * 129,
    "%2e%2e",
    "import os",
    "__class__",
]
junk_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(TRICKS),
    st.just("x" * 70000),
)
junk = st.recursive(
    junk_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
names = st.sampled_from(["weights", "vocab", "model_2", "_x"]) | st.sampled_from(TRICKS) | st.text(max_size=20)
hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
reason = st.text(max_size=40) | st.just("r" * 501)


def valid_shaped(endpoint: str, kernel_ids: list[str], pids: list[int]) -> st.SearchStrategy[Any]:
    """Bodies shaped as the request schema says (some values still out of range)."""
    kernel_id = st.sampled_from(kernel_ids) | st.sampled_from(TRICKS) | st.text(max_size=20)
    pid = st.sampled_from(pids) | st.none() | st.integers(min_value=-1, max_value=2**40)
    if endpoint == "suspend":
        return st.fixed_dictionaries({}, optional={"reason": reason, "dry_run": st.booleans(), "force": st.booleans()})
    if endpoint in ("checkpoint", "resume"):
        return st.fixed_dictionaries({}, optional={"reason": reason})
    if endpoint == "verify":
        observed = st.fixed_dictionaries(
            {"canary_hash": st.none() | hex64, "pid": pid},
            optional={
                "process_start": st.none() | st.floats(allow_nan=False, allow_infinity=False),
                "helper": st.booleans(),
                "registered": st.lists(names, max_size=3),
                "restored": st.lists(names, max_size=3),
                "names": st.dictionaries(
                    names, st.fixed_dictionaries({}, optional={"content_hash": st.text(max_size=80)}), max_size=3
                ),
            },
        )
        return st.fixed_dictionaries(
            {"kernel_id": kernel_id}, optional={"names": st.lists(names, max_size=3), "observed": observed}
        )
    if endpoint == "checkpoint-record":
        checkpoint = st.fixed_dictionaries(
            {
                "checkpoints": st.lists(
                    st.fixed_dictionaries({"name": names}, optional={"bytes": st.integers(-1, 2**40)}), max_size=3
                ),
                "canary": st.fixed_dictionaries({"hash": hex64, "pid": pid}),
            },
            optional={"generation": st.text(max_size=70), "checkpoint_dir": st.sampled_from(TRICKS)},
        )
        return st.fixed_dictionaries({"kernel_id": kernel_id, "checkpoint": checkpoint})
    return st.just({})


def with_one_change(body: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid-shaped body with one field set to anything (a wrong type, an unknown field)."""

    def change(args: tuple[Any, str, Any]) -> Any:
        data, key, value = args
        if isinstance(data, dict):
            data = {**data, key: value}
        return data

    keys = st.sampled_from(["reason", "dry_run", "force", "kernel_id", "names", "observed", "checkpoint"]) | st.text(
        max_size=10
    )
    return st.tuples(body, keys, junk).map(change)


def request_bodies(endpoint: str, kernel_ids: list[str], pids: list[int]) -> st.SearchStrategy[bytes]:
    shaped = valid_shaped(endpoint, kernel_ids, pids)
    as_json = st.one_of(shaped, shaped, with_one_change(shaped), junk).map(lambda d: json.dumps(d).encode())
    deep = st.integers(min_value=30, max_value=20000).map(lambda n: b"[" * n + b"]" * n)
    oversized = shaped.map(lambda d: json.dumps(d).encode().ljust(MAX_BODY_BYTES + 1))
    raw = st.binary(max_size=300) | st.sampled_from(
        [b"", b"{", b"null", b"[]", b'{"a":1}{"b":2}', b"NaN", b'{"reason": Infinity}', b"\xef\xbb\xbf{}", b"\xff\xfe"]
    )
    return st.one_of(as_json, as_json, deep, oversized, raw)


def pair_requests(
    endpoint: str, method: str, kernel_ids: list[str], pids: list[int]
) -> st.SearchStrategy[bytes | None]:
    bodies = request_bodies(endpoint, kernel_ids, pids)
    return st.none() | bodies if method in ("GET", "DELETE", "OPTIONS") else bodies


def examples(endpoint: str, method: str) -> int:
    """Bodies matter where a handler reads them: most examples go there."""
    return POST_EXAMPLES if (endpoint, method) in DOCUMENTED and method == "POST" else OTHER_EXAMPLES


class Hostile:
    """Drives the in-process server from hypothesis (in a worker thread) on the test's own event loop."""

    def __init__(self, api: SuspendClient, state_dir: Path, target: str, loop: asyncio.AbstractEventLoop):
        self.api = api
        self.state_dir = state_dir
        self.target = target
        self.loop = loop
        self.errors = error_validator()
        #: what was sent and answered: (endpoint, method, status) -> count
        self.seen: Counter[tuple[str, str, int]] = Counter()
        #: how often an accepted request moved the state and it was brought back
        self.restored = 0

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    async def send(self, endpoint: str, method: str, body: bytes | None) -> tuple[int, bytes]:
        kwargs: dict[str, Any] = {"method": method, "allow_nonstandard_methods": True}
        if body is not None or method in ("POST", "PUT", "PATCH"):
            kwargs["body"] = body or b""
        try:
            response = await self.api.fetch(API, endpoint, **kwargs)
        except HTTPClientError as exc:
            if exc.response is None:  # a timeout, not an HTTP answer
                raise
            response = exc.response
        return response.code, response.body or b""

    def check(self, endpoint: str, method: str, body: bytes | None) -> None:
        before = self.run(snapshot(self.api, self.state_dir))
        code, answer = self.run(self.send(endpoint, method, body))
        shown = (method, endpoint, (body or b"")[:200], code, answer[:500])
        self.seen[endpoint, method, code] += 1
        assert code < 500, shown
        if (endpoint, method) in DOCUMENTED:
            openapi.check_answer(method, endpoint, code, answer)  # the contract, 2xx included
        if 400 <= code < 500:
            error = json.loads(answer)
            problems = [e.message for e in self.errors.iter_errors(error)]
            assert not problems, (shown, problems)
            assert error["message"], shown
            assert self.run(snapshot(self.api, self.state_dir)) == before, shown
        elif 200 <= code < 300 and method == "POST":
            self.run(self.back_to_target())

    async def back_to_target(self) -> None:
        """A request that was accepted may have moved the state: wait for it, then go back."""
        api = self.api
        status = await api.wait_done()
        if status["state"] == self.target or {status["state"], self.target} <= {"running", "ready"}:
            return
        self.restored += 1
        if status["state"] == "suspended":
            status = await api.resume()
        if status["state"] == "failed" and self.target != "failed":
            status = await api.json("POST", "acknowledge", {})
        if self.target in ("suspended", "failed") and status["state"] in ("running", "ready"):
            status = await api.suspend()
        if self.target == "failed" and status["state"] == "suspended":
            status = await api.resume()
        assert status["state"] == self.target or {status["state"], self.target} <= {"running", "ready"}, status


@pytest.fixture
def suspend_config() -> dict[str, Any]:
    return {"flush_kernel_timeout": 5.0, "capacity_max_wait": 0.3}


async def reach(api: SuspendClient, target: str) -> tuple[list[str], list[int]]:
    """One notebook with a kernel, a live-state record of it (a checkpoint), then the target state."""
    session = await api.open_notebook("hostile.ipynb")
    kernel_id = session["kernel"]["id"]
    pid = api.kernel_pid(kernel_id)
    await api.json("POST", "checkpoint", {"reason": "a record to verify against"}, expect=202)
    assert (await api.wait_done())["state"] == "running"
    if target in ("suspended", "failed"):
        assert (await api.suspend())["state"] == "suspended"
    if target == "failed":
        backend = api.serverapp.web_app.settings["jupyter_suspend_lifecycle"].backend
        backend.capacity_headroom_bytes = 2**60  # never enough memory: the resume fails
        backend.capacity_retry_seconds = 0.1
        assert (await api.resume())["state"] == "failed"
    return [kernel_id], [pid]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["running", "suspended", "failed"])
async def test_hostile_requests_in_every_state(suspend_api: SuspendClient, state_dir: Path, target: str) -> None:
    kernel_ids, pids = await reach(suspend_api, target)
    hostile = Hostile(suspend_api, state_dir, target, asyncio.get_running_loop())

    def every_pair() -> None:
        for endpoint in ENDPOINTS:
            for method in METHODS:

                @hostile_settings(examples(endpoint, method))
                @given(body=pair_requests(endpoint, method, kernel_ids, pids))
                def property_(body: bytes | None) -> None:
                    hostile.check(endpoint, method, body)  # noqa: B023 - run at once, in this iteration

                property_()

    await asyncio.to_thread(every_pair)
    assert (await suspend_api.status())["state"] in ({target} | ({"ready"} if target == "running" else set()))
    # Every endpoint and every method was tried; POST bodies got 400s and more than 400s.
    assert {(endpoint, method) for endpoint, method, _ in hostile.seen} == {(e, m) for e in ENDPOINTS for m in METHODS}
    for endpoint in POST_ENDPOINTS:
        codes = {code for e, m, code in hostile.seen if (e, m) == (endpoint, "POST")}
        assert 400 in codes, (endpoint, codes)
    print(f"{target}: {sum(hostile.seen.values())} requests, state restored {hostile.restored}x:", dict(hostile.seen))
