"""atomic_output: all-or-nothing writes."""

import stat

import pytest

from catengine.atomic import atomic_output


def test_success_moves_the_file_into_place_with_open_like_permissions(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_output(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_text("new")
        assert not target.exists()  # nobody sees it before the block ends
    assert target.read_text() == "new"
    assert list(tmp_path.iterdir()) == [target]
    assert stat.S_IMODE(target.stat().st_mode) & 0o044  # not mkstemp's 0600


def test_failure_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(target) as tmp:
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_no_overwrite_mode_refuses_an_existing_file(tmp_path):
    target = tmp_path / "v1.nc"
    target.write_text("stored")
    with pytest.raises(FileExistsError):
        with atomic_output(target, overwrite=False, mode=0o444) as tmp:
            tmp.write_text("other")
    assert target.read_text() == "stored"
    assert list(tmp_path.iterdir()) == [target]
