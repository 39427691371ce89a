"""Application checkpoints on a real file system: round trips, atomicity,
corruption, retention, devices. No server needed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jupyter_suspend.kernel import tensors
from jupyter_suspend.kernel.store import CheckpointStore, SaveError, SaveItem, check_name, observe


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


def test_numpy_round_trip_with_manifest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "nb")
    rng = np.random.default_rng(7)
    data = {
        "weights": rng.standard_normal((300, 200)).astype(np.float32),
        "ids": np.arange(1000, dtype=np.int64),
        "mask": rng.random(50) > 0.5,
        "fortran": np.asfortranarray(rng.standard_normal((30, 40))),
        "strings": np.array(["a", "bc"]),  # not a raw dtype: pickled
        "scalar": np.float16(3.5),
        "empty": np.zeros((0, 3), dtype=np.float64),
    }
    gen = store.save([SaveItem("data", data), SaveItem("lr", 0.01)], operation_id="op1")
    manifest = json.loads((gen.path / "manifest.json").read_text())
    entry = manifest["objects"]["data"]
    assert manifest["operation_id"] == "op1"
    by_key = {t["key"]: t for t in entry["data"]["tensors"]}
    assert by_key["weights"]["dtype"] == "float32"
    assert by_key["weights"]["shape"] == [300, 200]
    assert by_key["weights"]["device"] == "cpu"
    assert manifest["digest"] == "xxh3-128"
    assert len(by_key["weights"]["chunk_digests"][0]) == 32  # 128 bits, hex
    assert "strings" not in by_key
    assert entry["bytes"] == (gen.path / "data.pkl").stat().st_size + (gen.path / "data.safetensors").stat().st_size

    result = CheckpointStore(tmp_path / "nb").load()
    assert result.failed == {}
    assert result.missing == []
    loaded = result.objects["data"]
    for key, value in data.items():
        np.testing.assert_array_equal(loaded[key], value)
        assert loaded[key].dtype == value.dtype
    assert result.objects["lr"] == 0.01
    assert result.sources == {"data": gen.id, "lr": gen.id}
    # The hash verification compares is the same before and after the trip.
    assert observe(loaded)["content_hash"] == entry["content_hash"]
    assert observe(data)["content_hash"] == entry["content_hash"]


def test_safetensors_files_are_readable_without_jupyter_suspend(tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    weights = {"layer.weight": np.ones((4, 3), np.float32), "layer.bias": np.arange(3, dtype=np.float64)}
    gen = CheckpointStore(tmp_path).save([SaveItem("weights", weights)])
    loaded = safetensors_numpy.load_file(str(gen.path / "weights.safetensors"))
    assert set(loaded) == set(weights)
    for key, value in weights.items():
        np.testing.assert_array_equal(loaded[key], value)


def test_corruption_is_detected_by_name_and_never_loaded(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    good = np.arange(100_000, dtype=np.float64)
    older = store.save([SaveItem("series", good)])
    time.sleep(0.002)
    newest = store.save([SaveItem("series", good * 2), SaveItem("meta", {"epoch": 3})])
    data_file = newest.path / "series.safetensors"
    flip_byte(data_file, data_file.stat().st_size - 100)
    flip_byte(newest.path / "meta.pkl", 5)

    result = store.load()
    assert "series" not in result.objects
    assert "meta" not in result.objects
    assert "checkpoint 'series'" in result.failed["series"]
    assert "fails its XXH3-128 check" in result.failed["series"]
    assert "not loaded" in result.failed["series"]
    assert f"--generation {older.id}" in result.failed["series"]  # the older intact copy is named
    assert "meta.pkl fails its XXH3-128 check" in result.failed["meta"]
    assert store.check(newest, "series") is not None
    assert store.check(older, "series") is None

    # The older generation is intact and can be loaded explicitly.
    explicit = store.load(["series"], generation=older.id)
    np.testing.assert_array_equal(explicit.objects["series"], good)


def test_truncated_checkpoint_is_reported(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    gen = store.save([SaveItem("x", np.ones(10_000))])
    data_file = gen.path / "x.safetensors"
    os.truncate(data_file, data_file.stat().st_size // 2)
    result = store.load(["x"])
    assert "truncated" in result.failed["x"]
    assert result.objects == {}


def test_retention_keeps_newest_copies_of_every_name(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    first = store.save([SaveItem("a", 1), SaveItem("b", "only here")])
    gens = [store.save([SaveItem("a", i)]) for i in range(2, 6)]
    remaining = [g.id for g in store.generations()]
    # 'a' keeps its two newest copies; the first generation stays for 'b'.
    assert remaining == [gens[-1].id, gens[-2].id, first.id]
    result = store.load()
    assert result.objects == {"a": 5, "b": "only here"}
    assert result.sources["b"] == first.id
    store.save([SaveItem("b", "newer")])
    store.save([SaveItem("b", "newest")])
    assert first.id not in [g.id for g in store.generations()]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".trash-"))]


def test_unpicklable_object_gets_a_clear_message_and_nothing_is_committed(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save([SaveItem("a", 1)])
    with open(tmp_path / "log.txt", "w") as handle, pytest.raises(SaveError) as info:
        store.save([SaveItem("a", 2), SaveItem("handle", handle)])
    message = str(info.value)
    assert "cannot save 'handle'" in message
    assert "TextIOWrapper cannot be pickled" in message
    assert "register save/restore callbacks" in message
    assert [len(g.objects) for g in store.generations()] == [1]
    assert store.load().objects == {"a": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("name", ["1x", "a.b", "../etc", "class", "", "naïve"])
def test_names_must_be_identifiers(name: str) -> None:
    with pytest.raises(ValueError, match="identifiers"):
        check_name(name)


WRITER = """
import sys, numpy as np
from jupyter_suspend.kernel.store import CheckpointStore, SaveItem
store = CheckpointStore(sys.argv[1])
store.save([SaveItem("big", np.full(int(sys.argv[2]) // 8, 2.0))])
print("finished", flush=True)
"""


@pytest.mark.slow
def test_writer_killed_mid_write_leaves_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    store = CheckpointStore(folder)
    previous = store.save([SaveItem("big", np.ones(1000))])
    size = 768 * 2**20
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(size)], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            tmp = [p for p in folder.iterdir() if p.name.startswith(".tmp-")]
            data = [f for p in tmp for f in p.glob("*.safetensors")]
            if data and data[0].stat().st_size > 16 * 2**20:
                break
            assert child.poll() is None, "the writer finished before it could be killed; make it bigger"
            time.sleep(0.005)
        else:
            pytest.fail("the writer never started writing")
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert b"finished" not in child.stdout.read()  # type: ignore[union-attr]

    # The half-written generation is invisible; the previous one loads.
    assert [g.id for g in store.generations()] == [previous.id]
    result = store.load(["big"])
    assert result.failed == {}
    np.testing.assert_array_equal(result.objects["big"], np.ones(1000))
    # The next save clears what the killed writer left behind.
    store.save([SaveItem("small", 1)])
    assert not [p for p in folder.iterdir() if p.name.startswith(".tmp-")]


def test_callbacks_round_trip_in_a_new_process(tmp_path: Path) -> None:
    pytest.importorskip("cloudpickle")
    script = textwrap.dedent(
        """
        import sys, json
        from pathlib import Path
        from jupyter_suspend.kernel.store import CheckpointStore, SaveItem
        class Connection:  # defined in __main__: saved by value with cloudpickle
            def __init__(self, rows): self.rows = rows
        conn = Connection([1, 2, 3])
        def save(folder):
            (folder / "rows.json").write_text(json.dumps(conn.rows))
        def restore(folder):
            return Connection(json.loads((folder / "rows.json").read_text()))
        CheckpointStore(sys.argv[1]).save([SaveItem("conn", save=save, restore=restore)])
        """
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
    result = CheckpointStore(tmp_path).load(["conn"])
    folder = result.objects["conn"]
    assert folder.restore is not None
    assert folder.restore(folder.path).rows == [1, 2, 3]
    (folder.path / "rows.json").write_text("[9]")
    again = CheckpointStore(tmp_path).load(["conn"])
    assert "rows.json fails its XXH3-128 check" in again.failed["conn"]


# -- torch -------------------------------------------------------------------


def test_torch_module_and_state_dict_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    half = torch.randn(5, 3).to(torch.bfloat16)
    state = OrderedDict((k, v.clone()) for k, v in model.state_dict().items())
    empty = torch.zeros(0, 4)
    gen = CheckpointStore(tmp_path).save(
        [SaveItem("model", model), SaveItem("state", state), SaveItem("half", half), SaveItem("empty", empty)]
    )
    entry = gen.objects["model"]
    keys = [t["key"] for t in entry["data"]["tensors"]]
    assert keys == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert all(t["parameter"] and t["requires_grad"] for t in entry["data"]["tensors"])
    assert gen.objects["half"]["data"]["tensors"][0]["dtype"] == "bfloat16"

    result = CheckpointStore(tmp_path).load()
    assert result.failed == {}
    restored = result.objects["model"]
    assert isinstance(restored[0].weight, torch.nn.Parameter)
    x = torch.randn(3, 8)
    assert torch.equal(restored(x), model(x))
    assert torch.equal(result.objects["half"], half)
    assert list(result.objects["state"]) == list(state)
    assert observe(restored)["content_hash"] == entry["content_hash"]
    with torch.no_grad():
        restored[0].bias.add_(1)
    assert observe(restored)["content_hash"] != entry["content_hash"]
    assert observe(restored)["tensors_hash"] != entry["tensors_hash"]
    assert result.objects["empty"].shape == (0, 4)
    # Loaded tensors live in numpy-allocated host memory: training goes on.
    optimizer = torch.optim.SGD(restored.parameters(), lr=0.1)
    before = restored[0].weight.detach().clone()
    restored(x).sum().backward()
    optimizer.step()
    assert not torch.equal(restored[0].weight, before)


def test_tensor_from_an_absent_device_loads_on_cpu_with_a_warning(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the tensor would go back to it")
    store = CheckpointStore(tmp_path)
    gen = store.save([SaveItem("w", torch.arange(6.0).reshape(2, 3))])
    # As if written on a GPU machine: only the recorded device differs.
    manifest_path = gen.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["objects"]["w"]["data"]["tensors"][0]["device"] = "cuda:0"
    manifest_path.write_text(json.dumps(manifest))
    result = store.load(["w"])
    assert result.failed == {}
    assert result.objects["w"].device.type == "cpu"
    assert torch.equal(result.objects["w"], torch.arange(6.0).reshape(2, 3))
    assert result.warnings == ["w: tensor 'value' was on cuda:0, which is not available here: loaded on the CPU"]


@pytest.mark.parametrize(
    "manifest",
    [
        "[]",
        '"a string"',
        '{"format": "jupyter-suspend-checkpoint", "objects": []}',
        '{"format": "jupyter-suspend-checkpoint", "objects": {"x": 5}}',
        '{"format": "jupyter-suspend-checkpoint", "objects": {"x": {"name": "y", "kind": "object"}}}',
        '{"format": "jupyter-suspend-checkpoint", "objects": {"x": {"name": "x", "kind": "object", "pickle": []}}}',
    ],
)
def test_manifest_of_the_wrong_shape_is_reported_by_name_and_skipped(tmp_path: Path, manifest: str) -> None:
    store = CheckpointStore(tmp_path / "nb")
    good = store.save([SaveItem("x", obj=[1, 2, 3])])
    bad = tmp_path / "nb" / "20991231T235959.000000Z-abcdef"
    bad.mkdir()
    (bad / "manifest.json").write_text(manifest)
    # Listing, loading, saving (with its pruning) keep working; the bad generation is named.
    assert [g.id for g in store.generations()] == [good.id]
    assert len(store.problems) == 1
    assert bad.name in store.problems[0]
    assert "corrupt manifest" in store.problems[0]
    assert store.names() == ["x"]
    assert store.load(["x"]).objects == {"x": [1, 2, 3]}
    newer = store.save([SaveItem("x", obj=[4])])
    assert [g.id for g in store.generations()] == [newer.id, good.id]
    assert bad.exists()  # kept for whoever wants to look at it


def test_generation_folder_names_with_a_trailing_newline_are_not_generations(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "nb")
    good = store.save([SaveItem("x", obj=1)])
    odd = tmp_path / "nb" / (good.id[:-1] + "0\n")
    (tmp_path / "nb" / good.id).rename(odd)
    assert store.generations() == []


@pytest.mark.parametrize("wrap", [lambda f: f, lambda f: {"log": f, "n": 1}, lambda f: [1, [f]]])
def test_open_file_objects_are_refused_with_the_message(tmp_path: Path, wrap: Any) -> None:
    store = CheckpointStore(tmp_path / "nb")
    with open(tmp_path / "data.txt", "w") as fh, pytest.raises(SaveError, match="Open files") as failure:
        store.save([SaveItem("log", obj=wrap(fh))])
    assert "open file" in str(failure.value)
    assert store.generations() == []


# -- chunked, concurrently verified reads -------------------------------------------
# Small chunks (the manifest records the chunk size, reads follow it) so that a
# few KiB give many chunks in flight in the hash threads at once.

SMALL_CHUNK = 4096


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    from jupyter_suspend.kernel import store as store_module
    from jupyter_suspend.kernel import tensors

    monkeypatch.setattr(store_module, "CHUNK_BYTES", SMALL_CHUNK)
    monkeypatch.setattr(tensors, "CHUNK_BYTES", SMALL_CHUNK)  # observe() hashes with the same chunks
    return SMALL_CHUNK


@pytest.fixture
def slow_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk digests finish late and out of order: the reads run ahead of the
    verification, and a later chunk's digest is often ready before an earlier one's."""
    from jupyter_suspend.kernel import tensors

    digest_function = tensors.digest_function
    delays = iter([0.004, 0.0, 0.002, 0.0, 0.001] * 1000)

    def late_digest(name: str) -> Any:
        digest = digest_function(name)

        def late(view: memoryview) -> str:
            time.sleep(next(delays))
            return digest(view)

        return late

    monkeypatch.setattr(tensors, "digest_function", late_digest)


def _chunk_of(gen: Any, name: str, key: str, index: int) -> tuple[Path, int, int]:
    """(data file, first byte of chunk ``index`` of tensor ``key``, its length)."""
    tensor = next(t for t in gen.objects[name]["data"]["tensors"] if t["key"] == key)
    start = index * SMALL_CHUNK if index >= 0 else (len(tensor["chunk_digests"]) + index) * SMALL_CHUNK
    length = min(SMALL_CHUNK, tensor["nbytes"] - start)
    return gen.path / gen.objects[name]["data"]["file"], tensor["offset"] + start, length


@pytest.mark.parametrize("chunk", [0, 7, -1], ids=["first", "middle", "last-short"])
@pytest.mark.usefixtures("slow_hashes")
def test_a_corrupt_chunk_is_refused_while_chunks_verify_concurrently(
    tmp_path: Path, small_chunks: int, chunk: int
) -> None:
    store = CheckpointStore(tmp_path)
    values = np.arange(10_000, dtype=np.float64)  # 80 000 bytes: 19 full chunks and a short one
    gen = store.save([SaveItem("series", {"a": values, "b": values[:100] + 1})])
    digests = next(t for t in gen.objects["series"]["data"]["tensors"] if t["key"] == "a")["chunk_digests"]
    assert len(digests) == 20
    data_file, offset, length = _chunk_of(gen, "series", "a", chunk)
    assert length == (80_000 - 19 * small_chunks if chunk == -1 else small_chunks)
    flip_byte(data_file, offset + length - 1)

    result = store.load(["series"])
    assert result.objects == {}
    assert result.failed["series"] == (
        f"checkpoint 'series' (generation {gen.id}) is corrupt: tensor 'a' fails its XXH3-128 check; not loaded"
    )
    assert store.check(gen, "series") is not None
    flip_byte(data_file, offset + length - 1)  # repaired: loads again
    np.testing.assert_array_equal(store.load(["series"]).objects["series"]["a"], values)


@pytest.mark.usefixtures("slow_hashes")
def test_a_file_truncated_inside_a_chunk_is_refused_while_chunks_verify_concurrently(
    tmp_path: Path, small_chunks: int
) -> None:
    store = CheckpointStore(tmp_path)
    gen = store.save([SaveItem("x", np.ones(10_000))])
    data_file = gen.path / "x.safetensors"
    os.truncate(data_file, data_file.stat().st_size - small_chunks - 10)
    result = store.load(["x"])
    assert result.objects == {}
    assert "is truncated; not loaded" in result.failed["x"]


@pytest.mark.usefixtures("slow_hashes")
def test_chunk_edges_round_trip(tmp_path: Path, small_chunks: int) -> None:
    """Exact multiples of the chunk, a last short chunk, one byte, empty arrays,
    several tensors in one file: each keeps its own digests, in order."""
    rng = np.random.default_rng(3)
    data: dict[str, Any] = {
        "exact": rng.integers(0, 255, 3 * small_chunks, dtype=np.uint8),
        "short_tail": rng.standard_normal(small_chunks // 8 * 2 + 3),
        "one_byte": np.array([7], dtype=np.uint8),
        "empty": np.zeros(0, dtype=np.float32),
        "empty_2d": np.zeros((0, 5), dtype=np.int64),
        "after_empty": rng.standard_normal((40, 30)).astype(np.float32),
    }
    store = CheckpointStore(tmp_path)
    gen = store.save([SaveItem("data", data)])
    tensors = {t["key"]: t for t in gen.objects["data"]["data"]["tensors"]}
    empty_digest = "99aa06d3014798d86001c324468d497f"  # XXH3-128 of no bytes
    for key, value in data.items():
        expected_chunks = max(1, -(-value.nbytes // small_chunks))
        assert len(tensors[key]["chunk_digests"]) == expected_chunks, key
    assert tensors["empty"]["chunk_digests"] == [empty_digest]
    assert tensors["empty_2d"]["chunk_digests"] == [empty_digest]

    result = store.load(["data"])
    assert result.failed == {}
    loaded = result.objects["data"]
    for key, value in data.items():
        assert loaded[key].dtype == value.dtype, key
        assert loaded[key].shape == value.shape, key
        np.testing.assert_array_equal(loaded[key], value)
    assert observe(loaded)["content_hash"] == gen.objects["data"]["content_hash"]

    # The tensor after the empty ones is still checked at its own offset.
    data_file, offset, _ = _chunk_of(gen, "data", "after_empty", -1)
    flip_byte(data_file, offset)
    failed = store.load(["data"]).failed["data"]
    assert "tensor 'after_empty' fails its XXH3-128 check; not loaded" in failed


# -- the digest (issue 17, "resume at the speed of the disk") -----------------------

#: A checkpoint written by format version 1 (SHA-256 only, the manifest names no digest), made by
#: the store at commit 72bbed3 with 4 KiB chunks: ``data`` (arrays in 3 + 1 + 1 chunks, a string)
#: and ``notes`` (saved by callbacks, a file).
FORMAT_V1 = Path(__file__).parent / "checkpoints" / "format-v1"


def _v1_copy(tmp_path: Path) -> CheckpointStore:
    folder = tmp_path / "v1"
    shutil.copytree(FORMAT_V1, folder)
    return CheckpointStore(folder)


def test_resume_digest_an_old_sha256_checkpoint_still_loads_and_compares(tmp_path: Path, small_chunks: int) -> None:
    store = _v1_copy(tmp_path)
    (gen,) = store.generations()
    assert gen.manifest["chunk_bytes"] == small_chunks  # observe() hashes with the checkpoint's chunks
    assert gen.manifest["version"] == 1
    assert "digest" not in gen.manifest
    assert gen.digest == "sha256"
    assert store.check(gen, "data") is None
    assert store.check(gen, "notes") is None

    result = store.load()
    assert result.failed == {}
    data = result.objects["data"]
    np.testing.assert_array_equal(data["weights"], np.arange(3000, dtype=np.float32).reshape(60, 50) / 7)
    np.testing.assert_array_equal(data["ids"], np.arange(10, dtype=np.int64))
    assert data["empty"].shape == (0, 3)
    assert data["label"] == "version 1"
    notes = result.objects["notes"]
    assert notes.restore is not None
    assert notes.restore(notes.path) == "written by a save callback\n"
    # Verification compares with the recorded hash in that checkpoint's digest, so a server's record
    # made before the digest changed still matches the restored object.
    assert store.digest_of("data") == "sha256"
    assert observe(data, store.digest_of("data"))["content_hash"] == gen.objects["data"]["content_hash"]
    assert observe(data)["content_hash"] != gen.objects["data"]["content_hash"]  # the new default differs

    # A new save of the same names uses the new digest; an older SHA-256 copy stays readable beside it.
    newer = store.save([SaveItem("data", data)])
    assert newer.digest == "xxh3-128"
    assert store.digest_of("data") == "xxh3-128"
    assert store.load(["data"], generation=gen.id).failed == {}


def test_resume_digest_a_corrupt_old_sha256_checkpoint_is_refused(tmp_path: Path) -> None:
    store = _v1_copy(tmp_path)
    (gen,) = store.generations()
    flip_byte(gen.path / "data.safetensors", 280 + 4096 + 5)  # the second chunk of 'weights'
    flip_byte(gen.path / "notes.files" / "notes.txt", 0)
    result = store.load()
    assert result.objects == {}
    assert result.failed["data"].endswith("tensor 'weights' fails its SHA-256 check; not loaded")
    assert result.failed["notes"].endswith("notes.txt fails its SHA-256 check; not loaded")
    assert "fails its SHA-256 check" in str(store.check(gen, "data"))


@pytest.mark.parametrize("part", ["tensor chunk", "pickle", "callback file"])
def test_resume_digest_a_corrupt_chunk_under_the_new_digest_is_refused(tmp_path: Path, part: str) -> None:
    def save_rows(folder: Path) -> None:
        (folder / "rows.json").write_text(json.dumps(list(range(100))))

    store = CheckpointStore(tmp_path)
    values = np.arange(3 * 2**20, dtype=np.float64)  # 24 MiB: a full 16 MiB chunk and a short one
    gen = store.save([SaveItem("series", {"a": values}), SaveItem("conn", save=save_rows, restore=lambda f: f)])
    assert gen.digest == "xxh3-128"
    assert gen.manifest["version"] == 2
    tensor = gen.objects["series"]["data"]["tensors"][0]
    assert len(tensor["chunk_digests"]) == 2
    assert "sha256_chunks" not in tensor
    assert store.load().failed == {}
    if part == "tensor chunk":
        flip_byte(gen.path / "series.safetensors", tensor["offset"] + 2**24 + 123)  # inside the second chunk
        name, expected = "series", "tensor 'a' fails its XXH3-128 check; not loaded"
    elif part == "pickle":
        flip_byte(gen.path / "series.pkl", 3)
        name, expected = "series", "series.pkl fails its XXH3-128 check; not loaded"
    else:
        flip_byte(gen.path / "conn.files" / "rows.json", 1)
        name, expected = "conn", "rows.json fails its XXH3-128 check; not loaded"
    result = store.load()
    assert name not in result.objects
    assert result.failed[name].endswith(expected)
    assert store.check(gen, name) is not None


def test_resume_digest_can_be_chosen_and_a_wrong_choice_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path)
    monkeypatch.setenv(tensors.DIGEST_ENV, "sha256")
    gen = store.save([SaveItem("x", np.ones(1000))])
    assert gen.digest == "sha256"
    assert len(gen.objects["x"]["data"]["tensors"][0]["chunk_digests"][0]) == 64
    assert store.load(["x"]).failed == {}
    monkeypatch.setenv(tensors.DIGEST_ENV, "md5")
    with pytest.raises(SaveError, match=r"JUPYTER_SUSPEND_CHECKPOINT_DIGEST='md5' is not a digest \(allowed: "):
        store.save([SaveItem("x", np.zeros(1000))])
    assert [g.id for g in store.generations()] == [gen.id]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_resume_digest_without_xxhash_saves_sha256_and_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path)
    assert store.save([SaveItem("x", np.ones(1000))]).digest == "xxh3-128"
    monkeypatch.setattr(tensors, "_xxhash", lambda: None)
    result = store.load(["x"])
    assert result.objects == {}
    assert result.failed["x"].endswith(
        "cannot be checked: digest 'xxh3-128' needs the xxhash package, which is not installed here"
    )
    assert store.save([SaveItem("y", np.ones(10))]).digest == "sha256"
    assert store.load(["y"]).failed == {}


def test_resume_digest_an_unknown_or_mistyped_digest_is_refused_by_name(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    gen = store.save([SaveItem("x", np.ones(1000))])
    manifest_path = gen.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "digest": "crc7"}))
    result = store.load(["x"])
    assert "cannot be checked: unknown digest 'crc7'" in result.failed["x"]
    manifest_path.write_text(json.dumps({**manifest, "digest": 7}))
    assert store.load(["x"]).missing == ["x"]
    assert "'digest' is not a string" in store.problems[0]
    del manifest["objects"]["x"]["data"]["tensors"][0]["chunk_digests"]
    manifest_path.write_text(json.dumps(manifest))
    assert store.load(["x"]).missing == ["x"]
    assert "has a tensor without its chunk checksums" in store.problems[0]


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(" ", 1)[0]
        if "-" in first and not first.endswith(":"):
            start, end = (int(part, 16) for part in first.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")
def test_restored_arrays_are_private_writable_memory_that_asks_for_huge_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore reads into a private mapping that asks for huge pages, as numpy does for its own
    large arrays, and keeps them while they are fast (here: whatever they cost, so that a busy
    machine's slow chunk does not decide the test)."""
    big = np.arange(2**22, dtype=np.float64)  # 32 MiB, two chunks
    CheckpointStore(tmp_path).save([SaveItem("big", big)])
    monkeypatch.setattr(tensors, "HUGE_PAGE_SLOW_SECONDS_PER_MIB", float("inf"))
    loaded = CheckpointStore(tmp_path).load(["big"]).objects["big"]
    np.testing.assert_array_equal(loaded, big)
    flags = _vm_flags(loaded.ctypes.data + loaded.nbytes // 2)
    assert "hg" in flags
    assert "sh" not in flags  # private: a forked child copies on write, never shares the array
    assert tensors.backing_log[-1] == (big.nbytes, True, None)
    loaded[0] = -1.0  # writable
    assert loaded[0] == -1.0
    # The next checkpoint of the restored array is the same as any array's.
    again = CheckpointStore(tmp_path / "again").save([SaveItem("big", loaded)])
    assert observe(loaded)["content_hash"] == again.objects["big"]["content_hash"]


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")
def test_slow_huge_pages_are_given_up_for_the_rest_of_the_array(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the host must fault huge pages in again (10-33 s per GiB seen here), the rest of
    the array is read into 4 KiB pages: here every chunk counts as slow."""
    big = np.arange(6 * 2**20, dtype=np.float64)  # 48 MiB, three chunks
    CheckpointStore(tmp_path).save([SaveItem("big", big)])
    monkeypatch.setattr(tensors, "HUGE_PAGE_SLOW_SECONDS_PER_MIB", 0.0)
    loaded = CheckpointStore(tmp_path).load(["big"]).objects["big"]
    np.testing.assert_array_equal(loaded, big)
    nbytes, kept, gave_up_at = tensors.backing_log[-1]
    assert (nbytes, kept) == (big.nbytes, False)
    assert gave_up_at is not None
    assert gave_up_at < big.nbytes
    assert "nh" in _vm_flags(loaded.ctypes.data + loaded.nbytes - 1)  # the end: no huge pages


def test_huge_pages_survive_one_late_chunk_but_not_two_or_one_far_too_slow() -> None:
    """A preempted reader or a disk stall makes one chunk late; that is no sign of the host's memory."""
    mib = 2**20
    slow = tensors.HUGE_PAGE_SLOW_SECONDS_PER_MIB * 16  # a 16 MiB chunk at exactly the limit

    def memory() -> tensors.HostMemory:
        host = tensors.HostMemory(64 * mib)
        assert host.huge
        return host

    late_once = memory()
    late_once.chunk_read(16 * mib, 16 * mib, 2 * slow)
    late_once.chunk_read(32 * mib, 16 * mib, slow / 4)
    late_once.chunk_read(48 * mib, 16 * mib, 2 * slow)
    assert late_once.huge
    assert late_once.gave_up_huge_at is None
    late_twice = memory()
    late_twice.chunk_read(16 * mib, 16 * mib, 2 * slow)
    late_twice.chunk_read(32 * mib, 16 * mib, 2 * slow)
    assert not late_twice.huge
    assert late_twice.gave_up_huge_at == 32 * mib
    far_too_slow = memory()
    far_too_slow.chunk_read(16 * mib, 16 * mib, 5 * slow)
    assert not far_too_slow.huge
    assert far_too_slow.gave_up_huge_at == 16 * mib
    small = tensors.HostMemory(2 * mib)  # one huge page at most: not asked for
    assert not small.huge
