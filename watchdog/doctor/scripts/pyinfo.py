"""Run by `npu-watchdog doctor` inside the *training* interpreter: report versions as JSON.

Standalone on purpose (only the standard library, Python 3.6+ syntax): the training environment
does not have npu-watchdog installed. Versions come from the installed packages' metadata, so
nothing is imported and no device is touched.
"""

import json
import platform
import sys


def _dist_version(name):
    try:
        from importlib import metadata  # Python 3.8+
    except ImportError:  # pragma: no cover - very old interpreters
        try:
            import pkg_resources
            return pkg_resources.get_distribution(name).version, None
        except Exception as exc:  # noqa: BLE001 - report whatever went wrong
            return None, "%s: %s" % (type(exc).__name__, exc)
    for candidate in (name, name.replace("_", "-")):
        try:
            return metadata.version(candidate), None
        except metadata.PackageNotFoundError:
            continue
        except Exception as exc:  # noqa: BLE001
            return None, "%s: %s" % (type(exc).__name__, exc)
    return None, "not installed"


def main():
    out = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "packages": {},
        "errors": {},
    }
    for name in ("torch", "torch_npu"):
        version, error = _dist_version(name)
        out["packages"][name] = version
        if error:
            out["errors"][name] = error
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
