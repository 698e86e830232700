"""`files.replacing` and `write_file`, the one writer of whole files: the destination is the old
file or the new one, never a half-written one, and nothing is left beside it."""
import os
import stat

import pytest

from oar_attrib.files import move_into_place, replacing, write_file


def test_write_file_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    write_file(path, "first\n")
    write_file(path, "second\n")
    assert path.read_text() == "second\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    write_file(path, b"\x00bytes")
    assert path.read_bytes() == b"\x00bytes"


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    write_file(path, "kept\n")
    with pytest.raises(RuntimeError):
        with replacing(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert path.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_the_temporary_sits_beside_the_file_and_keeps_its_permissions(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    with replacing(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith("out.txt.")
        tmp.write_text("new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.read_text() == "new"
    fresh = tmp_path / "fresh.txt"
    write_file(fresh, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask


def test_move_into_place_puts_a_folder_and_replaces_one_only_when_asked(tmp_path):
    new, out = tmp_path / "new", tmp_path / "out"
    new.mkdir()
    (new / "a.txt").write_text("1")
    move_into_place(new, out)
    assert (out / "a.txt").read_text() == "1" and not new.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.txt").write_text("2")
    with pytest.raises(OSError):
        move_into_place(other, out)  # another process got there first: theirs is kept
    move_into_place(other, out, replace=True)
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
