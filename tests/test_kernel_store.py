"""Application checkpoints on a real file system: round trips, atomicity,
corruption, retention, devices. No server needed."""

from __future__ import annotations

import json
import os
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
    assert len(by_key["weights"]["sha256_chunks"][0]) == 64
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
    assert "fails its SHA-256 check" in result.failed["series"]
    assert "not loaded" in result.failed["series"]
    assert f"--generation {older.id}" in result.failed["series"]  # the older intact copy is named
    assert "meta.pkl fails its SHA-256 check" in result.failed["meta"]
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
    assert "rows.json fails its SHA-256 check" in again.failed["conn"]


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

    digest = tensors._digest
    delays = iter([0.004, 0.0, 0.002, 0.0, 0.001] * 1000)

    def late(view: memoryview) -> str:
        time.sleep(next(delays))
        return digest(view)

    monkeypatch.setattr(tensors, "_digest", late)


def _chunk_of(gen: Any, name: str, key: str, index: int) -> tuple[Path, int, int]:
    """(data file, first byte of chunk ``index`` of tensor ``key``, its length)."""
    tensor = next(t for t in gen.objects[name]["data"]["tensors"] if t["key"] == key)
    start = index * SMALL_CHUNK if index >= 0 else (len(tensor["sha256_chunks"]) + index) * SMALL_CHUNK
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
    digests = next(t for t in gen.objects["series"]["data"]["tensors"] if t["key"] == "a")["sha256_chunks"]
    assert len(digests) == 20
    data_file, offset, length = _chunk_of(gen, "series", "a", chunk)
    assert length == (80_000 - 19 * small_chunks if chunk == -1 else small_chunks)
    flip_byte(data_file, offset + length - 1)

    result = store.load(["series"])
    assert result.objects == {}
    assert result.failed["series"] == (
        f"checkpoint 'series' (generation {gen.id}) is corrupt: tensor 'a' fails its SHA-256 check; not loaded"
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
    empty_digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    for key, value in data.items():
        expected_chunks = max(1, -(-value.nbytes // small_chunks))
        assert len(tensors[key]["sha256_chunks"]) == expected_chunks, key
    assert tensors["empty"]["sha256_chunks"] == [empty_digest]
    assert tensors["empty_2d"]["sha256_chunks"] == [empty_digest]

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
    assert "tensor 'after_empty' fails its SHA-256 check; not loaded" in failed
