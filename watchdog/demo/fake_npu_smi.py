#!/usr/bin/env python3
"""A fake `npu-smi` for tests and demos: replays real captures and scripted scenarios.

It stands in for the NPU only (the one thing tests may fake). It imports nothing from the project,
so it behaves like an external program. Behaviour is chosen by environment variables:

  FAKE_NPU_SMI_CAPTURE=<file>   `npu-smi info` prints this file verbatim (exit 0).
                                `npu-smi info -t health -i N [-c C]` prints an OK health record.
  FAKE_NPU_SMI_SCENARIO=<file>  a JSON scenario (below), RE-READ ON EVERY CALL: another process
                                may rewrite it (atomically: write a temp file, then rename) to
                                change the state live.
  FAKE_NPU_SMI_COUNTER=<file>   where the call counter lives (default: `<scenario>.calls`).
  FAKE_NPU_SMI_MAPPING=<file>   `npu-smi info -m` prints this file verbatim (a real capture);
                                without it (and without a scenario "mapping") the mapping of the
                                generated table is printed (logic ids 0.. in table order).

Scenario file (JSON object; every key optional):

  {
    "capture": "info_910B3.txt",      replay this capture for `info` (relative paths are relative
                                      to the scenario file); otherwise a table is generated:
    "generate": {                     a generated 910B-style table (the defaults shown)
      "npus": 8, "chips_per_npu": 1,  chips_per_npu 2 gives an A3-style table (Phy-ID column,
                                      power "-" on the second die)
      "npu_ids": [0, 1, ...],         card ids (default 0..npus-1)
      "name": "910B3", "version": "23.0.6",
      "aicore": 0, "hbm_used_mb": 3400, "hbm_total_mb": 65536,
      "power_w": 95.0, "temp_c": 36, "health": "OK"
    },
    "devices": {                      per-chip overrides; key "N" (chip 0 of NPU N) or "N:C"
      "3": {"aicore": 97, "hbm_used_mb": 41000, "power_w": 250.5, "temp_c": 88,
            "health": "Alarm",        shown in the table and by `-t health`
            "health_codes": ["8C084E00"], "health_info": ["adda heart beat lost"],
            "ecc_single_bit": 0, "ecc_double_bit": 0,   `-t ecc -i N` (HBM counts)
            "aicore_freq_mhz": 1800, "aicore_cur_freq_mhz": 1800,  `-t common -i N`
            "gone": true}             the chip vanishes from the table (and `-t health -i` of a
                                      vanished card answers "Invalid card id.")
    },
    "processes": [{"npu": 0, "chip": 0, "pid": 4242, "name": "python", "memory_mb": 30000}],
    "mapping": "info_m_310_atlas300.txt",  a capture printed by `npu-smi info -m` (relative paths
                                      are relative to the scenario file)
    "behavior": "ok",                 ok | hang | fail | garbage | empty, for every call
    "health_behavior": "ok",          the same, for `-t health` calls only (default: behavior)
    "mapping_behavior": "ok",         the same, for `info -m` calls only (default: behavior)
    "fail_text": "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\\ndcmi model initialized
                  failed, because the device is used. ret is -8020",
    "exit_code": 1,                   exit code of "fail" (the real code is undocumented)
    "delay_seconds": 0,               answer this late (a slow npu-smi)
    "hang_child": false,              "hang" also starts a sleeping child process (tests that the
                                      caller kills the whole process group)
    "pid_file": null,                 "hang" writes its pid (and the child's) into this file
    "rounds": [ {...}, {...} ],       per-round overrides of any key above; see below
    "rounds_by": "calls",             "calls": round k = the k-th `info` call (0-based);
                                      "seconds": round k = seconds since the first call // round_seconds
    "round_seconds": 1
  }

Rounds: the effective state of a call is the top-level keys overridden by `rounds[k]` (the last
round repeats forever). `devices` and `generate` are merged key by key (per device, per field);
other keys are replaced. Only `npu-smi info` advances the call counter; `-t health` answers from the
state of the latest `info` call. `devices` overrides apply to generated tables; with a `capture`
only health overrides and behaviours apply (switch captures per round with `capture`).

Behaviours: "hang" sleeps forever (until killed); "fail" prints `fail_text` and exits with
`exit_code`; "garbage" prints text that is not a table and exits 0; "empty" prints nothing, exit 0.
Unknown arguments print the usage text and exit 1.
"""

import fcntl
import json
import os
import subprocess
import sys
import time

USAGE = "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n"
DEFAULT_FAIL = ("DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
                "dcmi model initialized failed, because the device is used. ret is -8020\n")
GARBAGE = "\x1b[31m*** npu-smi: internal state dump ***\x1b[0m\n0xdeadbeef 17 ?? %%%%\nsegments: [bad]\n"

GEN_DEFAULTS = {
    "npus": 8, "chips_per_npu": 1, "name": "910B3", "version": "23.0.6", "aicore": 0,
    "hbm_used_mb": 3400, "hbm_total_mb": 65536, "power_w": 95.0, "temp_c": 36, "health": "OK",
}
W0, W1, W2 = 27, 15, 52  # cell widths of the classic 98-column table


def _merge(base, over):
    out = dict(base)
    for key, value in over.items():
        if key in ("devices", "generate") and isinstance(value, dict):
            merged = dict(out.get(key) or {})
            for k, v in value.items():
                if key == "devices" and isinstance(v, dict):
                    merged[k] = {**(merged.get(k) or {}), **v}
                else:
                    merged[k] = v
            out[key] = merged
        else:
            out[key] = value
    return out


def _counter_path(scenario_path):
    return os.environ.get("FAKE_NPU_SMI_COUNTER") or scenario_path + ".calls"


def _round_index(scenario_path, spec, advance):
    """Count `info` calls in a small JSON file (locked), return this call's round index."""
    path = _counter_path(scenario_path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        text = fh.read()
        try:
            state = json.loads(text) if text.strip() else {}
        except ValueError:
            state = {}
        calls = int(state.get("calls", 0))
        start = float(state.get("start", time.time()))
        if advance:
            calls += 1
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"calls": calls, "start": start}))
    if spec.get("rounds_by") == "seconds":
        return int((time.time() - start) // float(spec.get("round_seconds", 1)))
    return max(0, calls - 1)


def load_state(advance):
    """The effective scenario of this call (a dict), from the environment."""
    scenario = os.environ.get("FAKE_NPU_SMI_SCENARIO")
    if scenario:
        with open(scenario, encoding="utf-8") as fh:
            spec = json.load(fh)
        rounds = spec.get("rounds") or []
        state = {k: v for k, v in spec.items() if k != "rounds"}
        if rounds:
            k = _round_index(scenario, spec, advance)
            state = _merge(state, rounds[min(k, len(rounds) - 1)])
        for key in ("capture", "mapping"):
            cap = state.get(key)
            if cap and not os.path.isabs(cap):
                state[key] = os.path.join(os.path.dirname(os.path.abspath(scenario)), cap)
        return state
    capture = os.environ.get("FAKE_NPU_SMI_CAPTURE")
    if capture:
        return {"capture": capture}
    sys.stderr.write("fake npu-smi: set FAKE_NPU_SMI_SCENARIO or FAKE_NPU_SMI_CAPTURE\n")
    sys.exit(3)


def _hang(state):
    pids = [os.getpid()]
    if state.get("hang_child"):
        pids.append(subprocess.Popen(["sleep", "3600"]).pid)
    if state.get("pid_file"):
        with open(state["pid_file"], "w", encoding="utf-8") as fh:
            fh.write(" ".join(str(p) for p in pids))
    sys.stdout.write("+------------------------------------------------------------------------------------------------+\n")
    sys.stdout.flush()
    while True:
        time.sleep(3600)


def behave(state, which):
    """Apply a non-"ok" behaviour (exits or hangs); returns for "ok"."""
    time.sleep(float(state.get("delay_seconds") or 0))
    mode = state.get(which) or state.get("behavior") or "ok"
    if mode == "ok":
        return
    if mode == "hang":
        _hang(state)
    if mode == "fail":
        text = state.get("fail_text") or DEFAULT_FAIL
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        sys.exit(int(state.get("exit_code", 1)))
    if mode == "garbage":
        sys.stdout.write(GARBAGE)
        sys.exit(0)
    if mode == "empty":
        sys.exit(0)
    sys.stderr.write("fake npu-smi: unknown behavior %r\n" % mode)
    sys.exit(3)


def chips(state):
    """[(npu, chip, device_id, fields)] of a generated table, vanished chips excluded."""
    gen = {**GEN_DEFAULTS, **(state.get("generate") or {})}
    per = int(gen["chips_per_npu"])
    ids = gen.get("npu_ids") or list(range(int(gen["npus"])))
    devices = state.get("devices") or {}
    out = []
    logical = 0
    for npu in ids:
        for c in range(per):
            over = devices.get("%d:%d" % (npu, c)) or (devices.get(str(npu)) if c == 0 else None) or {}
            f = {k: gen[k] for k in ("name", "aicore", "hbm_used_mb", "hbm_total_mb", "power_w", "temp_c", "health")}
            f.update({k: v for k, v in over.items() if k in f})
            if per > 1 and c > 0 and "power_w" not in over:
                f["power_w"] = "-"
            if not over.get("gone"):
                out.append((npu, c, logical, f, over))
            logical += 1
    return gen, out


def _val(v):
    if v is None:
        return "NA"
    if isinstance(v, float):
        return "%.1f" % v
    return str(v)


def _pair(used, total):
    return "%-5s/ %s" % (used, total)


def _row(a, b, c):
    return "| %s| %s| %s|\n" % (a.ljust(W0 - 1), b.ljust(W1 - 1), c.ljust(W2 - 1))


def render_table(state):
    gen, rows = chips(state)
    per = int(gen["chips_per_npu"])
    full = "+" + "-" * (W0 + W1 + W2 + 2) + "+\n"
    dash = "+" + "-" * W0 + "+" + "-" * W1 + "+" + "-" * W2 + "+\n"
    eq = "+" + "=" * W0 + "+" + "=" * W1 + "+" + "=" * W2 + "+\n"
    out = [full, "| %s|\n" % ("npu-smi %s" % gen["version"]).ljust(32).__add__("Version: %s" % gen["version"]).ljust(W0 + W1 + W2 + 1), dash]
    out.append(_row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"))
    out.append(_row("Chip  Phy-ID" if per > 1 else "Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"))
    out.append(eq)
    for i, (npu, c, logical, f, _over) in enumerate(rows):
        bus = "0000:%02X:00.0" % (0xC1 - logical if logical < 0xC0 else logical % 256)
        out.append(_row("%-6s%s" % (npu, f["name"]), str(f["health"]),
                        "%-12s%-18s%s" % (_val(f["power_w"]), _val(f["temp_c"]), _pair(0, 0))))
        out.append(_row("%-6s%s" % (c, logical) if per > 1 else str(c), bus,
                        "%-12s%-18s%s" % (_val(f["aicore"]), _pair(0, 0), _pair(f["hbm_used_mb"], f["hbm_total_mb"]))))
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        out.append(full if nxt is not None and nxt[0] == npu else eq)
    out.append(dash)
    out.append("| %s| %s| %s| %s|\n" % ("NPU     Chip".ljust(W0 - 1), "Process id".ljust(W1 - 1),
                                      "Process name".ljust(25), "Process memory(MB)".ljust(W2 - 29)))
    out.append(eq)
    present = {(n, c) for n, c, _l, _f, _o in rows}
    procs = [p for p in (state.get("processes") or []) if (int(p["npu"]), int(p.get("chip", 0))) in present]
    for npu in sorted({n for n, _c, _l, _f, _o in rows}, key=lambda n: rows_index(rows, n)):
        mine = [p for p in procs if int(p["npu"]) == npu]
        if not mine:
            out.append("| %s|\n" % ("No running processes found in NPU %d" % npu).ljust(W0 + W1 + W2 + 1))
        for p in mine:
            out.append("| %s| %s| %s| %s|\n" % (("%-8s%s" % (npu, p.get("chip", 0))).ljust(W0 - 1),
                                              str(p["pid"]).ljust(W1 - 1), str(p.get("name", "")).ljust(25),
                                              str(p.get("memory_mb", 0)).ljust(W2 - 29)))
        out.append(eq)
    return "".join(out)


def rows_index(rows, npu):
    for i, r in enumerate(rows):
        if r[0] == npu:
            return i
    return len(rows)


def _capture_health(path, npu):
    """Health word of card `npu` in a replayed capture (first row of that card), or None."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 3 and cells[0].split()[:1] == [str(npu)] and len(cells[0].split()) == 2 \
                    and cells[1] and " " not in cells[1] and cells[1] != "Health":
                return cells[1]
    return None


def health(state, npu, chip):
    devices = state.get("devices") or {}
    over = devices.get("%d:%d" % (npu, chip)) or (devices.get(str(npu)) if chip == 0 else None) or {}
    if state.get("capture"):
        status = over.get("health") or _capture_health(state["capture"], npu)
        if status is None:
            return None
    else:
        _gen, rows = chips(state)
        found = [f for n, c, _l, f, _o in rows if n == npu and c == chip]
        if not found:
            return None
        status = found[0]["health"]
    codes = " ".join(over.get("health_codes") or []) or "NA"
    info = list(over.get("health_info") or [])
    lines = ["\tHealth Status                  : %s" % status,
             "\tError Code                     : %s" % codes,
             "\tError Information              : %s" % (info[0] if info else "NA")]
    for extra in info[1:]:
        lines += ["", "\t                               : %s" % extra]
    return "\n".join(lines) + "\n"


def _opt(args, flag):
    if flag in args:
        i = args.index(flag)
        if i + 1 < len(args) and args[i + 1].lstrip("-").isdigit():
            return int(args[i + 1])
        return "bad"
    return None


def render_mapping(state):
    """`npu-smi info -m` of the generated table (logic ids in table order, gone chips kept)."""
    gen = {**GEN_DEFAULTS, **(state.get("generate") or {})}
    per = int(gen["chips_per_npu"])
    ids = gen.get("npu_ids") or list(range(int(gen["npus"])))
    cols = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")
    out = ["".join(c.ljust(31) for c in cols).rstrip() + "\n"]
    logical = 0
    for npu in ids:
        for c in range(per):
            out.append("".join(str(v).ljust(31) for v in (npu, c, logical, "Ascend " + gen["name"])).rstrip() + "\n")
            logical += 1
    return "".join(out)


def main(argv):
    args = argv[1:]
    if not args or args[0] != "info":
        sys.stdout.write(USAGE)
        return 1
    rest = args[1:]
    if not rest:
        state = load_state(advance=True)
        behave(state, "behavior")
        if state.get("capture"):
            with open(state["capture"], encoding="utf-8") as fh:
                sys.stdout.write(fh.read())
        else:
            sys.stdout.write(render_table(state))
        return 0
    if rest == ["-m"]:
        state = load_state(advance=False)
        behave(state, "mapping_behavior")
        mapping = state.get("mapping") or os.environ.get("FAKE_NPU_SMI_MAPPING")
        if mapping:
            with open(mapping, encoding="utf-8") as fh:
                sys.stdout.write(fh.read())
        else:
            sys.stdout.write(render_mapping(state))
        return 0
    if "-t" in rest and rest[rest.index("-t") + 1:rest.index("-t") + 2] == ["health"]:
        state = load_state(advance=False)
        behave(state, "health_behavior")
        npu, chip = _opt(rest, "-i"), _opt(rest, "-c")
        if npu is None or npu == "bad":
            sys.stdout.write("Error parameter of -i\n" + USAGE)
            return 1
        if chip == "bad":
            sys.stdout.write("Error parameter of -c\n" + USAGE)
            return 1
        text = health(state, npu, chip or 0)
        if text is None:
            sys.stdout.write("Invalid card id.\nError parameter of -i\n" + USAGE)
            return 1
        sys.stdout.write(text)
        return 0
    if "-t" in rest and rest[rest.index("-t") + 1:rest.index("-t") + 2] in (["ecc"], ["common"]):
        state = load_state(advance=False)
        behave(state, "health_behavior")
        npu = _opt(rest, "-i")
        text = detail(state, rest[rest.index("-t") + 1], npu) if isinstance(npu, int) else None
        if text is None:
            sys.stdout.write("Invalid card id.\nError parameter of -i\n" + USAGE)
            return 1
        sys.stdout.write(text)
        return 0
    sys.stdout.write(USAGE)
    return 1


def detail(state, kind, npu):
    """`-t ecc` / `-t common` of card `npu` (chip 0), in the 910-era layout of the real captures;
    device keys "ecc_single_bit", "ecc_double_bit", "aicore_freq_mhz", "aicore_cur_freq_mhz"."""
    _gen, rows = chips(state)
    found = [(f, over) for n, c, _l, f, over in rows if n == npu and c == 0]
    if not found:
        return None
    f, over = found[0]
    key = lambda k: "\t%-30s : %s" % (k, "")  # noqa: E731
    if kind == "ecc":
        lines = [key("NPU ID") + str(npu), key("Chip Count") + "1", ""]
        for mem in ("DDR", "HBM"):
            lines += [key("%s Single Bit Error Count" % mem) + str(over.get("ecc_single_bit", 0) if mem == "HBM" else 0),
                      key("%s Double Bit Error Count" % mem) + str(over.get("ecc_double_bit", 0) if mem == "HBM" else 0),
                      key("%s Single Bit Isolated Pages Count" % mem) + "0",
                      key("%s Double Bit Isolated Pages Count" % mem) + "0"]
        lines.append(key("Chip ID") + "0")
    else:
        rated = over.get("aicore_freq_mhz", 1800)
        lines = [key("NPU ID") + str(npu), key("Chip Count") + "1", "", key("Chip ID") + "0",
                 key("Aicore Usage Rate(%)") + _val(f["aicore"]), key("Aicore Freq(MHZ)") + str(rated),
                 key("Aicore curFreq(MHZ)") + str(over.get("aicore_cur_freq_mhz", rated if f["aicore"] else 800)),
                 key("Temperature(C)") + _val(f["temp_c"]), key("NPU Real-time Power(W)") + _val(f["power_w"]),
                 "", key("Chip Name") + "mcu", key("Temperature(C)") + "38"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:
        sys.exit(0)
