"""`npu-watchdog demo`: the whole product on a simulated 8-NPU node, in about 100 seconds (each fault step also waits for its one resolve)."""

from __future__ import annotations

import argparse
import sys
import time


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "demo", help="run the daemon against a simulated 8-NPU node and play a fault sequence (about 100 s)",
        description="Starts a simulated node (8 rank processes under a torchrun-like launcher, heartbeats, "
                    "training logs, CANN-style plogs, a fake npu-smi), a local webhook receiver and the real "
                    "daemon, then plays: healthy training, a long checkpoint (no page), an HCCL hang, recovery, "
                    "a NaN loss, an NPU OOM with an HCCL cascade, a lost card and a killed rank. Prints a "
                    "timeline of each fault (injected, detected, delivered) and the first message of each; "
                    "exits 1 if any step sends more or fewer messages than expected. About 100 s at --speed 1. "
                    "Needs no NPU.")
    p.add_argument("--out", default=None, help="folder for snapshots, metrics scrape, logs (default: ./demo-output-<time>)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="scale every time constant (0.5 = twice as fast, 2 = half as fast)")
    p.add_argument("--quiet", action="store_true", help="do not print the alert messages, only the timeline")
    p.add_argument("--language", choices=("en", "zh"), default=None,
                   help="language of the messages (alerting.language; default en)")
    p.add_argument("--verbose", action="store_true", help="print every message in full as it arrives "
                   "(default: the first message of each fault, cut to a screenful)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from watchdog.demo.node import DemoSetupError
    from watchdog.demo.scenario import DemoRun, state_dir, summary_table

    if args.speed <= 0:
        print("npu-watchdog demo: --speed must be positive", file=sys.stderr)
        return 2
    from pathlib import Path

    out = Path(args.out or f"demo-output-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    try:
        run = DemoRun(out, speed=args.speed, echo=not args.quiet, verbose=args.verbose, language=args.language)
    except DemoSetupError as exc:
        print(f"npu-watchdog demo: {exc}", file=sys.stderr)
        return 2
    try:
        results = run.play()
        run.save_artifacts()
    except KeyboardInterrupt:
        print("\ninterrupted; cleaning up", file=sys.stderr)
        results = run.results
    finally:
        run.close()
    print("\nTimeline (times after injection):\n")
    print(summary_table(results))
    snap_dir = state_dir(out) / "snapshots"
    snaps = sorted(snap_dir.glob("*.tar.gz")) if snap_dir.exists() else []
    print(f"\nEverything is in {out}: daemon.log, config.yaml, metrics.txt, timeline.json, "
          f"{len(snaps)} snapshot(s) in {snap_dir.relative_to(out)}/")
    return 0 if results and all(r.ok for r in results) else 1
