"""Pack the parts of the source tree the install needs into one tar file, byte for byte the same
for the same sources: entries sorted, times, owners and compiled files left out.

Why: the role once copied the tree file by file, and Ansible checks every file of a recursive
copy on every run, hundreds of module calls per node (minutes per node at a fleet's scale, even
when nothing changed). One deterministic archive is one copy, unchanged when the sources are, so a
run that changes nothing is quick and reports nothing changed. Runs on the control machine with
the Python Ansible runs on (standard library only).

    python pack_source.py SOURCE_DIR OUT.tar PATH...
"""

import io
import os
import sys
import tarfile

SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache"}
SKIP_SUFFIXES = (".pyc", ".pyo")


def members(src, paths):
    """(archive name, file path) of every file under `paths` (links followed), sorted."""
    out = []
    for top in paths:
        full = os.path.join(src, top)
        if os.path.isfile(full):
            out.append((top, full))
            continue
        if not os.path.isdir(full):
            raise SystemExit("pack_source: %s is missing from %s" % (top, src))
        for root, dirs, files in os.walk(full):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in files:
                if name.endswith(SKIP_SUFFIXES):
                    continue
                path = os.path.join(root, name)
                if os.path.isfile(path):  # a link to a file is packed as that file, as a copy makes it
                    out.append((os.path.relpath(path, src).replace(os.sep, "/"), path))
    return sorted(out)


def pack(src, out, paths):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in members(src, paths):
            info = tarfile.TarInfo(name)
            with open(path, "rb") as fh:
                data = fh.read()
            info.size = len(data)
            info.mode = 0o755 if os.stat(path).st_mode & 0o111 else 0o644
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            tar.addfile(info, io.BytesIO(data))
    tmp = out + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(buf.getvalue())
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    pack(sys.argv[1], sys.argv[2], sys.argv[3:])
