"""`Tailer.written_while_down`: which saved discovered files are read again after a restart."""

from __future__ import annotations

import json
import os

from watchdog.logrules.tail import STATE_VERSION, Tailer


def _saved(path, st, offset, job="j", rank="1"):
    import hashlib

    head = path.read_bytes()[:7]
    entry = {"source": "train", "dev": st.st_dev, "ino": st.st_ino, "offset": offset,
             "fp": hashlib.sha1(head).hexdigest(), "fp_len": len(head)}
    if job is not None:
        entry.update(job=job, rank=rank)
    return {str(path): entry}


def test_only_the_same_file_grown_since_the_save_and_only_a_discovered_one(tmp_path):
    grown, same, configured, replaced = (tmp_path / n for n in ("grown.log", "same.log", "conf.log", "replaced.log"))
    for p in (grown, same, configured, replaced):
        p.write_text("step 1\n")
    files = {}
    files.update(_saved(grown, grown.stat(), 7))
    files.update(_saved(same, same.stat(), 7))
    files.update(_saved(configured, configured.stat(), 0, job=None))
    files.update(_saved(replaced, replaced.stat(), 0))
    files["/nonexistent/gone.log"] = {"source": "train", "dev": 1, "ino": 2, "offset": 0, "job": "j", "rank": "0"}
    state = tmp_path / "offsets.json"
    state.write_text(json.dumps({"version": STATE_VERSION, "files": files}))
    with open(grown, "a") as fh:
        fh.write("NPU out of memory\n")
    os.unlink(replaced)  # a new file at the same path (its inode may be the old one's, reused):
    replaced.write_text("x" * 100)  # another file, not read on from the old offset
    os.symlink(grown, tmp_path / "link.log")  # a link planted where a saved file was: not followed
    files.update(_saved(tmp_path / "link.log", grown.stat(), 0))
    state.write_text(json.dumps({"version": STATE_VERSION, "files": files}))
    t = Tailer([], str(state))
    assert t.written_while_down() == {str(grown): ("train", "j", "1")}
