"""A training rank for tests (no project imports): prints iteration lines, writes a heartbeat,
and obeys control files in $FAKE_TRAIN_CONTROL:

- `nan-<rank>`: print one NaN loss line;   - `exit-<rank>`: exit 1 now, silently;
- `quit-<rank>`: exit 0 now, silently (a rank that leaves early without failing);
- `segv-<rank>`: a real segmentation fault (NULL read);  - `oom-<rank>`: allocate host memory
  until the kernel kills it (the test puts it in a small memory cgroup first);
- `npuoom-<rank>`: print torch_npu's out-of-memory traceback, exit 1;
- `words-<rank>`: print that file's text, then go silent (a rank that logged errors, then hung);
- `finish`: phase `done` in the heartbeat (unless $FAKE_TRAIN_NO_DONE is set), rank 0 prints
  $FAKE_TRAIN_END_LINE (default "Training completed. ...", none if $FAKE_TRAIN_QUIET_END is
  set), all exit 0;
- `hang`: while it exists, every rank blocks as in a collective that never returns (no step, no
  line, no heartbeat, no CPU), then carries on;
- `oomcascade-<rank>`: that rank prints torch_npu's out-of-memory traceback and exits 1; every
  other rank then reports an HCCL timeout naming it (once) and blocks, as peers in a collective do.

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
    while True:
        if ctl and blocked(ctl, rank):
            time.sleep(0.2)
            continue
        step += 1
        print(f" iteration {step:8d}/ 100000 | lm loss: {2.0 - step * 1e-4:.6E} | grad norm: 0.75 |", flush=True)
        heartbeat(hb, rank, step, "train")
        if ctl and os.path.exists(os.path.join(ctl, f"nan-{rank}")) and not said_nan:
            print("{'loss': nan, 'learning_rate': 1e-05, 'epoch': 0.5}", flush=True)
            said_nan = True
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
            with open(words) as fh:
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
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
