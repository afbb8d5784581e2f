"""Count `getattr`/`hasattr` calls in watchdog/ by what they look into (docs/architecture.md).

Usage: python scripts/count_reflection.py [--list CATEGORY] [package dir, default watchdog]

Reflection on the daemon's own parts (the runtime, the engine, the probes, the snapshot taker...)
hides the wiring from the reader and the type checker: those are "runtime" and the count to keep
small. The rest reads what the program does not define and cannot type: the platform (modules
that may lack a name, exceptions, thread-locals, log records), plugin modules while they are
discovered, and data (config models walked by name, argparse results, probe observations: records
of a union of types, read by the detectors and metrics that accept several).

The category comes from the call's first argument (the receiver) as written, from the table
below; a receiver not in the table counts as "runtime", so a new site is counted until it is
classified on purpose.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections import defaultdict
from typing import Dict, Iterator, List, Tuple

#: Receiver (as ast.unparse writes it) -> category.
RECEIVERS: Dict[str, str] = {
    # the platform: modules that may lack a name, exceptions, thread-locals, log records, addresses
    "os": "platform", "yaml": "platform", "torch": "platform", "torch_npu": "platform",
    "torch.npu": "platform", "torch.npu.matmul": "platform", "exc": "platform", "_local": "platform",
    "record": "platform", "addr": "platform", "cur": "platform",
    # plugin modules, while they are discovered
    "mod": "plugin-module", "importlib.import_module(m)": "plugin-module",
    # data: config models, argparse results, typing annotations, parsed files
    "config.probes": "data", "self.probes": "data", "args": "data", "annotation": "data", "factory": "data",
    "getattr(m, 'func', m)": "data", "m": "data", "node": "data", "n": "data", "facts": "data",
    "cfg": "data", "alerting": "data", "base": "data", "value": "data", "c": "data", "hist": "data",
    # data: probe observations (records of a union of types)
    "obs": "observation", "sample.value": "observation", "latest.value": "observation",
    "last.value": "observation", "a": "observation", "p": "observation",
}
#: `self` inside these is a data record reading its own fields by name (a config section, the
#: doctor's version facts).
SELF_IS_DATA = ("watchdog/config/", "watchdog/doctor/versions.py")


def calls(root: str) -> Iterator[Tuple[str, int, str, str]]:
    """(path, line, function, receiver) of every getattr/hasattr call under `root`."""
    for folder, _dirs, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ("getattr", "hasattr") and node.args):
                    yield path, node.lineno, node.func.id, ast.unparse(node.args[0])


def category(path: str, receiver: str) -> str:
    if receiver == "self":
        return "data" if any(path.replace(os.sep, "/").startswith(p) for p in SELF_IS_DATA) else "runtime"
    return RECEIVERS.get(receiver, "runtime")


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="watchdog")
    ap.add_argument("--list", metavar="CATEGORY", help="print the sites of one category")
    args = ap.parse_args(argv)
    counts: Dict[str, int] = defaultdict(int)
    sites: Dict[str, List[str]] = defaultdict(list)
    for path, line, fn, receiver in sorted(calls(args.root)):
        cat = category(path, receiver)
        counts[cat] += 1
        sites[cat].append(f"{path}:{line}: {fn}({receiver}, ...)")
    for cat in ("runtime", "platform", "plugin-module", "data", "observation"):
        print(f"{cat:14} {counts.get(cat, 0)}")
    print(f"{'total':14} {sum(counts.values())}")
    if args.list:
        print("\n".join(sites.get(args.list, [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
