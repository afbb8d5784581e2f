"""One synthetic training rank: steps, heartbeats, training-log and plog lines, faults on request.

Run by the launcher as `python -m watchdog.demo.rank`, with RANK/LOCAL_RANK/WORLD_SIZE in its
environment like a torchrun child. It reads the node's control file every step (the scenario
rewrites it atomically) and behaves accordingly: train, checkpoint, eval, hang (a collective that
never returns: no steps, no heartbeats, no CPU), nan, oom (this rank dies the way torch_npu does;
its peers then hit an HCCL timeout), done (phase done, exit 0).
The heartbeat is written by the trainer-side helper shipped in contrib/heartbeat, on purpose.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, TextIO

def _stamp(t: float) -> str:
    lt = time.localtime(t)
    return time.strftime("%Y-%m-%d-%H:%M:%S", lt) + f".{int((t % 1) * 1000):03d}.{random.randint(0, 999):03d}"


class Rank:
    def __init__(self, root: Path, rank: int, world: int, heartbeat_cls: Any):
        self.root = root
        self.rank = rank
        self.world = world
        self.pid = os.getpid()
        self.step = 0
        self.loss = 7.5 + random.random()
        hb = os.environ.get("NPU_WATCHDOG_HEARTBEAT", str(root / "hb" / "rank{rank}.json"))
        self.hb = heartbeat_cls(hb.replace("{rank}", str(rank)), min_interval=0.5)
        self.log: TextIO = open(root / "logs" / f"rank{rank}.log", "a", buffering=1, encoding="utf-8")
        plog_dir = root / "plog"
        plog_dir.mkdir(exist_ok=True)
        name = f"plog-{self.pid}_{time.strftime('%Y%m%d%H%M%S')}{random.randint(0, 999):03d}.log"
        self.plog: TextIO = open(plog_dir / name, "a", buffering=1, encoding="utf-8")
        self.last_mode = ""

    def control(self) -> Dict[str, Any]:
        try:
            data = json.loads((self.root / "control.json").read_text())
        except (OSError, ValueError):
            return {"mode": "train"}
        mode = data.get("ranks", {}).get(str(self.rank), data.get("mode", "train"))
        return {**data, "mode": mode}

    def plog_line(self, level: str, module: str, msg: str) -> None:
        self.plog.write(f"[{level}] {module}({self.pid},python3):{_stamp(time.time())} [demo.cc:{random.randint(100, 999)}]"
                        f"[{self.pid + 17}]{msg}\n")

    def train_step(self, ctl: Dict[str, Any], nan: bool) -> None:
        # A little real CPU per step, like a data loader and a host-side launch loop.
        deadline = time.perf_counter() + ctl.get("cpu_seconds_per_step", 0.004)
        x = 0.0
        while time.perf_counter() < deadline:
            x += math.sqrt(random.random())
        self.step += 1
        self.loss = max(0.8, self.loss * 0.995 + random.uniform(-0.01, 0.01))
        loss = float("nan") if nan else self.loss
        grad = float("nan") if nan else random.uniform(0.8, 1.6)
        tps = random.uniform(3300, 3500)
        self.hb.beat(step=self.step, loss=loss, grad_norm=grad, loss_scale=65536.0, tokens_per_s=tps)
        if self.rank == 0 or nan:
            self.log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} | iteration {self.step:>7}/ 100000 | "
                           f"lm loss: {loss:.6E} | grad norm: {grad:.3f} | loss scale: 65536.0 | "
                           f"number of skipped iterations:   0 | number of nan iterations:   {1 if nan else 0} | "
                           f"tokens/s: {tps:.0f}\n")
        if nan and self.last_mode != "nan":
            self.log.write(f"[rank {self.rank}] WARNING: loss is nan at iteration {self.step}, "
                           f"grad norm nan; skipping update\n")

    def oom(self) -> None:
        self.log.write("Traceback (most recent call last):\n"
                       '  File "pretrain_gpt.py", line 412, in <module>\n'
                       "    loss = model(batch)\n"
                       '  File "torch/nn/modules/module.py", line 1518, in _wrapped_call_impl\n'
                       "    return forward_call(*args, **kwargs)\n"
                       f"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU {self.rank}; "
                       "60.97 GiB total capacity; 57.80 GiB already allocated; 57.80 GiB current active; "
                       "1.02 GiB free; 59.60 GiB reserved in total by PyTorch)\n")
        self.plog_line("ERROR", "RUNTIME", "Memory_Allocation_Failure(EL0004): Failed to allocate memory.")
        self.log.flush()
        self.plog.flush()
        os._exit(1)

    def hccl_timeout(self, peer: int) -> None:
        self.plog_line("ERROR", "HCCL", f"EI0002: The wait execution of the Notify register times out. Reason: "
                                        f"The Notify register has not received the Notify record from remote "
                                        f"rank: [{peer}].")

    def run(self) -> int:
        self.hb.phase_now("init")
        self.plog_line("INFO", "HCCL", f"HcclCommInitRootInfo success, rank[{self.rank}] ranksize[{self.world}]")
        time.sleep(0.5)
        self.hb.phase_now("train")
        peer_failed_at = None
        while True:
            ctl = self.control()
            mode = ctl["mode"]
            step_seconds = float(ctl.get("step_seconds", 0.5))
            if mode != self.last_mode:
                if mode in ("checkpoint", "eval"):
                    self.hb.phase_now(mode)
                    if self.rank == 0:
                        self.log.write(f"saving checkpoint at iteration {self.step} to /ckpt/iter_{self.step:07d}\n"
                                       if mode == "checkpoint" else f"evaluating at iteration {self.step}\n")
                elif mode in ("train", "nan") and self.last_mode in ("checkpoint", "eval", "init", ""):
                    self.hb.phase_now("train")
            if mode in ("train", "nan"):
                self.train_step(ctl, nan=(mode == "nan"))
            elif mode == "oom":
                self.oom()
            elif mode == "peer_failed":
                # A peer died inside a collective: this rank waits on it, then HCCL reports it.
                if peer_failed_at is None:
                    peer_failed_at = time.time()
                elif peer_failed_at > 0 and time.time() - peer_failed_at > float(ctl.get("hccl_timeout_seconds", 3)):
                    self.hccl_timeout(int(ctl.get("failed_rank", 0)))
                    peer_failed_at = -1.0  # reported once; the rank stays blocked like a real one
            elif mode == "done":
                self.hb.phase_now("done")
                self.log.write(f"[rank {self.rank}] training finished at iteration {self.step}\n")
                return 0
            elif mode == "exit":
                return 0
            # hang, checkpoint, eval: no steps (hang also writes no heartbeat at all)
            self.last_mode = mode
            time.sleep(step_seconds)


def main() -> int:
    root = Path(sys.argv[1])
    helper_dir = sys.argv[2]
    if os.path.isdir(helper_dir):  # a source checkout: contrib/heartbeat; installed: the package itself
        sys.path.insert(0, helper_dir)
    from npu_watchdog_heartbeat import Heartbeat  # the trainer-side heartbeat package, on purpose

    rank = int(os.environ["RANK"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return Rank(root, rank, world, Heartbeat).run()


if __name__ == "__main__":
    sys.exit(main())
