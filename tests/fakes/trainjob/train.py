"""A training rank for tests (no project imports): prints iteration lines, writes a heartbeat,
and obeys control files in $FAKE_TRAIN_CONTROL:

- `nan-<rank>`: print one NaN loss line;   - `exit-<rank>`: exit 1 now, silently;
- `quit-<rank>`: exit 0 now, silently (a rank that leaves early without failing);
- `segv-<rank>`: a real segmentation fault (NULL read);  - `oom-<rank>`: allocate host memory
  until the kernel kills it (the test puts it in a small memory cgroup first);
- `npuoom-<rank>`: print torch_npu's out-of-memory traceback, exit 1;
- `words-<rank>`: print that file's text as it is (carriage returns kept: a progress bar), then go
  silent (a rank that logged errors, then hung);
- `finish`: phase `done` in the heartbeat (unless $FAKE_TRAIN_NO_DONE is set), rank 0 prints
  $FAKE_TRAIN_END_LINE (default "Training completed. ...", none if $FAKE_TRAIN_QUIET_END is
  set), all exit 0;
- `hang`: while it exists, every rank blocks as in a collective that never returns (no step, no
  line, no heartbeat, no CPU), then carries on;
- `hcclfail-<rank>` holding a number N > 0: after 10 iterations the rank prints HCCL's notify
  wait timeout naming a remote rank, writes N - 1 back and exits 1 (a rank that fails the same
  way N times across restarts of its group, then runs on);
- `oomcascade-<rank>`: that rank prints torch_npu's out-of-memory traceback and exits 1; every
  other rank then reports an HCCL timeout naming it (once) and blocks, as peers in a collective do.

With $FAKE_TRAIN_STEP_SECONDS set (the pace tests), each step takes that long and its line is
Megatron-LM's whole format with its time stamp and `elapsed time per iteration (ms)` (measured, not
assumed; the time spent blocked, in a checkpoint or an evaluation is not a step's, as in Megatron);
$FAKE_TRAIN_WARMUP_SECONDS makes the first seconds' steps 3x slower (compilation). More files:
- `slow` or `slow-<rank>` (content: a factor, e.g. `1.2`): every rank steps that much slower, as in
  synchronous training where all wait for the slowest (the fake npu-smi makes that rank's chip the
  busier one, or, with `slow` alone, every chip less busy: a slower input pipeline);
- `checkpoint`, `eval`: while it exists, no step; rank 0 prints Megatron's `saving checkpoint at
  iteration ...` when it begins, or its `validation loss at iteration ...` when it ends; the
  heartbeat says the phase.

Its rank comes from RANK, else RANK_ID. `--workers N` forks N data-loader-like children (same command
line and environment, RANK included; they exit with their parent).
"""

import json
import os
import sys
import time


def heartbeat(path, rank, step, phase):
    if not path:
        return
    path = path.replace("{rank}", str(rank))
    if path.endswith("/"):
        os.makedirs(path, exist_ok=True)
        path = os.path.join(path, f"rank{rank}.json")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"rank": rank, "step": step, "phase": phase, "time": time.time(), "loss": 2.0}, fh)
    os.replace(tmp, path)


def blocked(ctl, rank):
    """Hung in a collective: the whole job (`hang`), or the peers of a rank that died of NPU OOM."""
    if os.path.exists(os.path.join(ctl, "hang")):
        return True
    if os.path.exists(os.path.join(ctl, f"oomcascade-{rank}")):
        print("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
              "    loss = model(batch)\nRuntimeError: NPU out of memory. Tried to allocate 2.00 GiB "
              f"(NPU {rank}; 60.97 GiB total capacity; 57.80 GiB already allocated; 1.02 GiB free)", flush=True)
        sys.exit(1)
    dead = [n for n in os.listdir(ctl) if n.startswith("oomcascade-")]
    if not dead:
        return False
    said = os.path.join(ctl, f"peer-said-{rank}")
    if not os.path.exists(said):
        open(said, "w").close()
        print(f"[ERROR] HCCL EI0002: The wait execution of the Notify register times out. Reason: the Notify "
              f"register has not received the Notify record from remote rank: [{dead[0].split('-')[1]}].", flush=True)
    return True


def slow_factor(ctl):
    """The job-wide step time factor of a `slow` or `slow-<rank>` file (1.0 without one)."""
    if not ctl:
        return 1.0
    for name in os.listdir(ctl):
        if name == "slow" or name.startswith("slow-"):
            try:
                with open(os.path.join(ctl, name)) as fh:
                    return float(fh.read().strip() or "1.2")
            except (OSError, ValueError):
                return 1.2
    return 1.0


def phase_wait(ctl, rank, step, hb):
    """A checkpoint or an evaluation while its control file exists: True when one happened."""
    for phase in ("checkpoint", "eval"):
        path = os.path.join(ctl, phase) if ctl else ""
        if not path or not os.path.exists(path):
            continue
        heartbeat(hb, rank, step, phase)
        if rank == 0 and phase == "checkpoint":
            print(f"saving checkpoint at iteration {step:7d} to /ckpt/run in torch format", flush=True)
        while os.path.exists(path):
            time.sleep(0.2)
        if rank == 0 and phase == "eval":
            print(f" validation loss at iteration {step} | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 |",
                  flush=True)
        return True
    return False


def megatron_line(step, elapsed):
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f" [{stamp}] iteration {step:8d}/  100000 | consumed samples: {step * 512:12d} | elapsed time per "
            f"iteration (ms): {elapsed * 1000:.1f} | learning rate: 1.500000E-04 | global batch size:   512 | "
            f"lm loss: {2.0 - step * 1e-4:.6E} | loss scale: 1.0 | grad norm: 0.750 | "
            f"number of skipped iterations:   0 | number of nan iterations:   0 |")


def main() -> int:
    rank = int(os.environ.get("RANK", os.environ.get("RANK_ID", "0")))
    ctl = os.environ.get("FAKE_TRAIN_CONTROL", "")
    hb = os.environ.get("NPU_WATCHDOG_HEARTBEAT", "")
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 0
    for _ in range(workers):  # forked, like torch's DataLoader workers: same command line and RANK
        if os.fork() == 0:
            ppid = os.getppid()
            while os.getppid() == ppid:
                time.sleep(0.2)
            os._exit(0)
    step, said_nan = 0, False
    pace = float(os.environ.get("FAKE_TRAIN_STEP_SECONDS", "0") or 0)
    warm_until = time.time() + float(os.environ.get("FAKE_TRAIN_WARMUP_SECONDS", "0") or 0)
    began = time.time()
    while True:
        if ctl and blocked(ctl, rank):
            time.sleep(0.2)
            began = time.time()
            continue
        if pace and phase_wait(ctl, rank, step, hb):
            began = time.time()
            continue
        step += 1
        if pace:
            time.sleep(max(began + pace * slow_factor(ctl) * (3 if time.time() < warm_until else 1) - time.time(), 0))
            now = time.time()
            print(megatron_line(step, now - began), flush=True)
            began = now
        else:
            print(f" iteration {step:8d}/ 100000 | lm loss: {2.0 - step * 1e-4:.6E} | grad norm: 0.75 |", flush=True)
        heartbeat(hb, rank, step, "train")
        if ctl and os.path.exists(os.path.join(ctl, f"nan-{rank}")) and not said_nan:
            print("{'loss': nan, 'learning_rate': 1e-05, 'epoch': 0.5}", flush=True)
            said_nan = True
        fails = os.path.join(ctl, f"hcclfail-{rank}") if ctl else ""
        if step >= 10 and fails and os.path.exists(fails):
            with open(fails) as fh:
                left = int(fh.read().strip() or 0)
            if left > 0:
                with open(fails, "w") as fh:
                    fh.write(str(left - 1))
                print("[ERROR] HCCL EI0002: The wait execution of the Notify register times out. Reason: the Notify "
                      f"register has not received the Notify record from remote rank: [{(rank + 1) % 2}].", flush=True)
                return 1
        if ctl and os.path.exists(os.path.join(ctl, f"exit-{rank}")):
            return 1
        if ctl and os.path.exists(os.path.join(ctl, f"quit-{rank}")):
            return 0
        if ctl and os.path.exists(os.path.join(ctl, f"segv-{rank}")):
            import ctypes
            ctypes.string_at(0)
        if ctl and os.path.exists(os.path.join(ctl, f"oom-{rank}")):
            hog = []
            while True:
                hog.append(bytearray(1 << 20))
        words = os.path.join(ctl, f"words-{rank}") if ctl else ""
        if words and os.path.exists(words):
            with open(words, newline="") as fh:
                print(fh.read(), end="", flush=True)
            while True:
                time.sleep(1)
        if ctl and os.path.exists(os.path.join(ctl, f"npuoom-{rank}")):
            print("Traceback (most recent call last):\n  File \"train.py\", line 412, in <module>\n"
                  "    loss = model(batch)\n"
                  f"RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU {rank}; 60.97 GiB total "
                  "capacity; 57.80 GiB already allocated; 1.02 GiB free)", flush=True)
            return 1
        if ctl and os.path.exists(os.path.join(ctl, "finish")):
            if not os.environ.get("FAKE_TRAIN_NO_DONE"):
                heartbeat(hb, rank, step, "done")
            if rank == 0 and not os.environ.get("FAKE_TRAIN_QUIET_END"):
                line = os.environ.get("FAKE_TRAIN_END_LINE", "Training completed. Do not forget to share your model!")
                print(line, flush=True)
            return 0
        if not pace:
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
