"""A direction file (``steer --direction``, ``units --direction``, the steer probe's ``direction=PATH.npy``) is
checked from its header before its data is read (issue 36, third pass, "Low").

Before: ``.npy`` headers claiming 8 TiB, string, structured and ``.npz`` arrays were tracebacks; complex and
datetime arrays were accepted; ``/dev/zero`` was called "does not exist"; numpy's ``allow_pickle=True`` advice
was passed on to the user. Now one reader (``reachlens.interventions.read_direction``) serves all three, and
each file here is one line naming it. The hostile files are made in the test, with numpy's own writer where
numpy can write them and by hand (a header and no data) where the point is what the header claims.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from reachlens.errors import MissingFileError, ReachlensError
from reachlens.interventions import read_direction


def _npy_header(path, descr: str, shape: tuple) -> None:
    """A ``.npy`` file of version 1.0 whose header claims ``shape`` of ``descr`` and holds no data."""
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode("latin1")
    pad = 64 - (10 + len(header) + 1) % 64
    path.write_bytes(b"\x93NUMPY\x01\x00" + (len(header) + pad + 1).to_bytes(2, "little") + header + b" " * pad + b"\n")


def _cases(tmp_path) -> dict[str, tuple]:
    """name -> (path, what the one line says)."""
    d = tmp_path
    np.save(d / "strings.npy", np.array(["a", "b"]))
    np.save(d / "bytes.npy", np.array([b"a", b"b"]))
    np.save(d / "structured.npy", np.zeros(3, dtype=[("x", "f4"), ("y", "i4")]))
    np.save(d / "complex.npy", np.ones(4, dtype=np.complex64))
    np.save(d / "datetime.npy", np.array(["2024-01-01"], dtype="datetime64[D]"))
    np.save(d / "timedelta.npy", np.array([1], dtype="timedelta64[s]"))
    np.save(d / "bools.npy", np.array([True, False]))
    np.save(d / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.savez(d / "archive.npz", v=np.ones(4))
    (d / "archive.npz").rename(d / "archive.npy")
    _npy_header(d / "huge.npy", "<f8", (1 << 40,))  # 8 TiB claimed
    _npy_header(d / "truncated.npy", "<f4", (64,))  # 256 bytes claimed, none there
    np.save(d / "nan.npy", np.array([1.0, np.nan]))
    np.save(d / "empty.npy", np.zeros(0))
    (d / "text.npy").write_text("0.1 0.2 0.3")
    (d / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "strings.json").write_text(json.dumps(["1", "2"]))
    (d / "nested_list.json").write_text(json.dumps([[1.0], [2.0]]))
    return {
        "strings": (d / "strings.npy", "not real numbers"), "bytes": (d / "bytes.npy", "not real numbers"),
        "structured": (d / "structured.npy", "not real numbers"), "complex": (d / "complex.npy", "not real numbers"),
        "datetime": (d / "datetime.npy", "not real numbers"), "timedelta": (d / "timedelta.npy", "not real numbers"),
        "bools": (d / "bools.npy", "not real numbers"), "objects": (d / "objects.npy", "not real numbers"),
        "npz": (d / "archive.npy", "is not a .npy array"), "huge": (d / "huge.npy", "claims 1,099,511,627,776 numbers"),
        "truncated": (d / "truncated.npy", "it is damaged"), "nan": (d / "nan.npy", "NaN or infinite"),
        "empty": (d / "empty.npy", "holds no numbers"), "text": (d / "text.npy", "is not a .npy array"),
        "dev zero": ("/dev/zero", "is not a regular file"), "folder": (d, "is not a regular file"),
        "nested json": (d / "nested.json", "nests too deeply"), "string json": (d / "strings.json", "not a flat list"),
        "nested list json": (d / "nested_list.json", "not a flat list"),
    }


def test_every_hostile_direction_file_is_one_line_naming_it(tmp_path) -> None:
    for name, (path, says) in _cases(tmp_path).items():
        with pytest.raises(ReachlensError) as err:
            read_direction(path)
        line = str(err.value)
        assert says in line and str(path) in line and "\n" not in line, (name, line)
        assert "allow_pickle" not in line and "does not exist" not in line, (name, line)


def test_a_missing_file_is_said_to_be_missing(tmp_path) -> None:
    with pytest.raises(MissingFileError, match="does not exist"):
        read_direction(tmp_path / "nowhere.npy")


def test_a_good_vector_reads_back_as_numpy_wrote_it(tmp_path) -> None:
    for dtype in (np.float32, np.float64, np.int64, np.uint8, np.float16):
        v = np.arange(1, 9).astype(dtype)
        np.save(tmp_path / "v.npy", v)
        np.testing.assert_array_equal(read_direction(tmp_path / "v.npy"), v.astype(np.float64))
    np.save(tmp_path / "m.npy", np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    np.testing.assert_array_equal(read_direction(tmp_path / "m.npy"), np.arange(6.0).reshape(2, 3))
    (tmp_path / "v.json").write_text("[1, 2.5, -3]")
    np.testing.assert_array_equal(read_direction(tmp_path / "v.json"), [1.0, 2.5, -3.0])


def test_the_cli_reader_and_the_steer_probe_read_through_it(tmp_path) -> None:
    from reachlens.cli._common import read_vector
    from reachlens.probes.activation import _read_vector

    np.save(tmp_path / "c.npy", np.ones(4, dtype=np.complex64))
    for read, path in ((read_vector, str(tmp_path / "c.npy")), (_read_vector, tmp_path / "c.npy")):
        with pytest.raises(ReachlensError, match="not real numbers"):
            read(path)
    with zipfile.ZipFile(tmp_path / "z.npy", "w") as z:
        z.writestr("v.npy", b"")
    with pytest.raises(ReachlensError, match="is not a .npy array"):
        read_vector(str(tmp_path / "z.npy"))
