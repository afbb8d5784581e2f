#!/usr/bin/env python3
"""A fake `hccn_tool` for tests and demos: answers the read-only queries of the 910B/A3 syntax
(`hccn_tool -i <dev> -<cmd> -g`) in the line shapes of the real tool (see
tests/fixtures/hccn_tool/ for the captures they follow).

It stands in for the NPU only. It imports nothing from the project, so it behaves like an
external program. Its state comes from a JSON scenario, RE-READ ON EVERY CALL (another process
may rewrite it atomically: write a temp file, then rename):

  FAKE_HCCN_TOOL_SCENARIO=<file>
  FAKE_HCCN_TOOL_LOG=<file>        optional: each call's arguments are appended, one line each

  {
    "devices": [0, 1, ...],          the device ids that exist (default 0..7); others: error
    "ports": {                       per-device state; unlisted devices are healthy:
      "3": {
        "link": "DOWN",              UP (default) | DOWN
        "changes": [[1733380000.5, "DOWN"], [1733380002.0, "UP"]],
                                     link change records (epoch seconds, any order; the tool
                                     prints the newest 10, newest first, in local time)
        "up_count": 5, "down_count": 4,   default: counted from "changes" (+1 up at start)
        "net_health": "Success",     any value of the tool's table
        "rx_mw": [1.0, 1.0, 1.0, 1.0], "tx_mw": [1.2, 1.2, 1.2, 1.2],
        "snr_db": 22.5,              media SNR of every lane
        "stat": {"roce_rx_err_pkt_num": 12},   counters (the rest print 0)
        "fec": "rs",                 rs | no | auto
        "behavior": "ok"             ok | hang | fail | garbage (this device's queries)
      }
    },
    "behavior": "ok"                 the same, for every device
  }

Any option that changes the device (`-s`, `-t`, `-cfg`) exits 1 with an error: the probe must
never send one (a test reads FAKE_HCCN_TOOL_LOG to check).
"""

import json
import os
import sys
import time

QUERIES = ("link", "link_stat", "net_health", "optical", "stat", "fec", "lldp")
STAT_ORDER = ("mac_tx_mac_pause_num", "mac_rx_mac_pause_num", "mac_tx_pfc_pkt_num", "mac_rx_pfc_pkt_num",
              "mac_tx_total_pkt_num", "mac_rx_total_pkt_num", "mac_tx_bad_pkt_num", "mac_rx_bad_pkt_num",
              "roce_rx_rc_pkt_num", "roce_tx_rc_pkt_num", "roce_rx_all_pkt_num", "roce_tx_all_pkt_num",
              "roce_rx_err_pkt_num", "roce_tx_err_pkt_num", "roce_cqe_num", "roce_rx_cnp_pkt_num",
              "roce_tx_cnp_pkt_num", "roce_unexpected_ack_num", "roce_out_of_order_num",
              "roce_verification_err_num", "roce_qp_status_err_num", "roce_new_pkt_rty_num",
              "nic_tx_all_pkg_num", "nic_rx_all_pkg_num")


def _asctime(t):
    return time.asctime(time.localtime(t))


def link_stat(dev, port):
    changes = sorted(port.get("changes") or [], key=lambda c: -float(c[0]))
    ups = sum(1 for c in changes if c[1] == "UP") + 1
    downs = sum(1 for c in changes if c[1] == "DOWN")
    p = "[devid %d]" % dev
    out = [p + "current time        : " + _asctime(time.time()),
           p + "link up count       : %d" % port.get("up_count", ups),
           p + "link down count     : %d" % port.get("down_count", downs)]
    if not changes:
        return "\n".join(out + [p + "link change records : NA"]) + "\n"
    out.append(p + "link change records :")
    for at, what in changes[:10]:
        out.append(p + "    %s    LINK %s" % (_asctime(float(at)), what))
    return "\n".join(out) + "\n"


def optical(port):
    rx = port.get("rx_mw") or [0.9907, 1.0189, 1.0213, 0.9871]
    tx = port.get("tx_mw") or [1.3968, 1.4140, 1.4988, 1.4035]
    snr = float(port.get("snr_db", 22.6289))
    rows = [("present", "present"), ("temperature", "47 C"), ("vendor name", "Hisense"),
            ("xsfp wave length", "850 nm"), ("Vcc", "3262.90 mV")]
    for i in range(4):
        rows += [("Tx Power%d" % i, "%.4f mW" % tx[i]), ("Rx Power%d" % i, "%.4f mW" % rx[i])]
    rows += [("TxPower High Thres", "3.5481 mW"), ("TxPower Low Thres", "0.2818 mW"),
             ("RxPower High Thres", "3.5481 mW"), ("RxPower Low Thres", "0.1445 mW")]
    los = "0xff" if port.get("link", "UP") == "DOWN" else "0x0"
    rows += [("Tx Los Flag", "0x0"), ("Rx Los Flag", los), ("Tx LoL Flag", "0x0"), ("Rx LoL Flag", los)]
    rows += [("Media SNR Lane%d" % i, "%.4f dB" % snr) for i in range(4)]
    return "optical info:\n" + "".join("%-21s: %s\n" % kv for kv in rows)


def answer(kind, dev, port):
    if kind == "link":
        return "link status: %s\n" % port.get("link", "UP")
    if kind == "link_stat":
        return link_stat(dev, port)
    if kind == "net_health":
        return "net health status: %s\n" % port.get("net_health", "Success")
    if kind == "optical":
        return optical(port)
    if kind == "stat":
        stat = port.get("stat") or {}
        return "packet statistics:\n" + "".join("%s:%d\n" % (k, int(stat.get(k, 0))) for k in STAT_ORDER)
    if kind == "fec":
        return "fec mode: %s FEC mode\n" % port.get("fec", "rs")
    return ("Chassis ID TLV\n        MAC: 70:7b:e8:00:00:%02x\nPort ID TLV\n        Ifname: 400GE1/1/%d:2\n"
            "System Name TLV\n        leaf-switch-01\nEnd of LLDPDU TLV\n" % (dev, dev + 1))


def main(argv):
    args = argv[1:]
    log = os.environ.get("FAKE_HCCN_TOOL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(" ".join(args) + "\n")
    if any(a in ("-s", "-t", "-cfg") for a in args):
        sys.stderr.write("fake hccn_tool: refusing a setting option (read-only queries only)\n")
        return 1
    kinds = [a[1:] for a in args if a[1:] in QUERIES]
    if "-i" not in args or "-g" not in args or len(kinds) != 1:
        sys.stdout.write("Usage: hccn_tool -i <device_id> -<command> -g\n")
        return 1
    try:
        dev = int(args[args.index("-i") + 1])
    except (IndexError, ValueError):
        sys.stdout.write("Invalid device id\n")
        return 1
    with open(os.environ["FAKE_HCCN_TOOL_SCENARIO"], encoding="utf-8") as fh:
        spec = json.load(fh)
    if dev not in (spec.get("devices") or list(range(8))):
        sys.stdout.write("device %d is not exist\n" % dev)
        return 1
    port = (spec.get("ports") or {}).get(str(dev)) or {}
    mode = port.get("behavior") or spec.get("behavior") or "ok"
    if mode == "hang":
        while True:
            time.sleep(3600)
    if mode == "fail":
        sys.stdout.write("get device %d info failed, ret = -8020\n" % dev)
        return 255
    if mode == "garbage":
        sys.stdout.write("\x1b[31m0xdeadbeef ?? %%%%\n")
        return 0
    sys.stdout.write(answer(kinds[0], dev, port))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:
        sys.exit(0)
