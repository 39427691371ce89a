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
