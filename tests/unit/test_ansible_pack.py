"""contrib/ansible's source archive (files/pack_source.py): the same bytes for the same sources, so
a rollout that changes nothing copies nothing; compiled files are left out, links packed as files."""

from __future__ import annotations

import importlib.util
import os
import tarfile
import time

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "contrib" / "ansible" / "roles" / "npu_watchdog" / "files" / "pack_source.py"


def _pack_module():
    spec = importlib.util.spec_from_file_location("pack_source", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(root):
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00compiled")
    (root / "pkg" / "stale.pyc").write_bytes(b"\x00compiled")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "linked.yaml").symlink_to("pkg/a.py")


def test_the_same_sources_pack_to_the_same_bytes_whatever_their_times(tmp_path):
    pack = _pack_module().pack
    src = tmp_path / "src"
    _tree(src)
    pack(str(src), str(tmp_path / "one.tar"), ["pkg", "run.sh", "linked.yaml"])
    later = time.time() + 3600
    for p in (src / "pkg" / "a.py", src / "run.sh"):
        os.utime(p, (later, later))
    pack(str(src), str(tmp_path / "two.tar"), ["pkg", "run.sh", "linked.yaml"])
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()
    (src / "pkg" / "a.py").write_text("A = 2\n")
    pack(str(src), str(tmp_path / "three.tar"), ["pkg", "run.sh", "linked.yaml"])
    assert (tmp_path / "three.tar").read_bytes() != (tmp_path / "one.tar").read_bytes()


def test_compiled_files_are_left_out_and_links_and_modes_kept_as_files(tmp_path):
    pack = _pack_module().pack
    src = tmp_path / "src"
    _tree(src)
    pack(str(src), str(tmp_path / "out.tar"), ["pkg", "run.sh", "linked.yaml"])
    with tarfile.open(tmp_path / "out.tar") as tar:
        entries = {m.name: m for m in tar.getmembers()}
        assert sorted(entries) == ["linked.yaml", "pkg/a.py", "run.sh"]
        assert entries["linked.yaml"].isfile()
        assert tar.extractfile("linked.yaml").read() == b"A = 1\n"
        assert entries["run.sh"].mode == 0o755 and entries["pkg/a.py"].mode == 0o644


def test_a_missing_path_stops_the_pack_naming_it(tmp_path):
    pack = _pack_module().pack
    with pytest.raises(SystemExit, match="nothere is missing"):
        pack(str(tmp_path), str(tmp_path / "out.tar"), ["nothere"])
    assert not (tmp_path / "out.tar").exists()
