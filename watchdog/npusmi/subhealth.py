"""Sub-health readings of one chip from npu-smi: ECC counters (`-t ecc`), AI Core frequency,
temperature and power (`-t common`), and what the vendor says to do about a health code.

Kept apart from `parse.py` and `run.py` (the `npu-smi info` table the npu probe reads every
round): these are per-chip detail queries the `subhealth` probe asks one at a time, so a node's
driver is never asked more than one question per chip per round.

The fault-code levels are the handling levels of the Ascend device plugin's fault table
(MindCluster `component/ascend-device-plugin/build/faultCode.json`): the level the vendor's own
scheduler acts on, mapped to the three actions a finding names (watch, drain after the job,
isolate now).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from watchdog.npusmi.parse import NpuSmiParseError, parse_kv
from watchdog.npusmi.run import STATS, NpuSmiStats, _query


# --- `npu-smi info -t ecc -i N` --------------------------------------------------------------

@dataclass(frozen=True)
class EccCounts:
    """ECC counters of one NPU (HBM and, on 910-era cards, DDR summed): the current error counts
    and the pages the driver has retired because of them."""

    single_bit: int
    double_bit: int
    single_bit_isolated_pages: int = 0
    double_bit_isolated_pages: int = 0


def _count(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise NpuSmiParseError(f"ECC count is not a number: {value[:40]!r}") from None


def parse_ecc(text: str) -> EccCounts:
    """`<DDR|HBM> Single|Double Bit Error Count` and `... Isolated Pages Count` keys, summed over
    the memories the card reports (910: DDR and HBM; 950: HBM only)."""
    sums = {"single bit error count": 0, "double bit error count": 0,
            "single bit isolated pages count": 0, "double bit isolated pages count": 0}
    seen = False
    for key, value in parse_kv(text):
        k = key.lower()
        for memory in ("hbm ", "ddr "):
            if k.startswith(memory) and k[len(memory):] in sums:
                sums[k[len(memory):]] += _count(value)
                seen = True
    if not seen:
        raise NpuSmiParseError("no 'HBM/DDR Single Bit Error Count' line in ECC output")
    return EccCounts(sums["single bit error count"], sums["double bit error count"],
                     sums["single bit isolated pages count"], sums["double bit isolated pages count"])


# --- `npu-smi info -t common -i N` -----------------------------------------------------------

@dataclass(frozen=True)
class CommonReading:
    """AI Core clock (rated and current), use, temperature and power of one chip."""

    aicore_freq_mhz: Optional[int]
    aicore_cur_freq_mhz: Optional[int]
    aicore_util_pct: Optional[float]
    temp_c: Optional[float]
    power_w: Optional[float]


def _float(value: str) -> Optional[float]:
    try:
        return float(value)
    except ValueError:
        return None


def parse_common(text: str) -> CommonReading:
    """The chip's block of `-t common` (the trailing `mcu` block repeats `Temperature(C)`: the
    first value, the chip's, is kept)."""
    first: Dict[str, str] = {}
    for key, value in parse_kv(text):
        k = key.lower()
        if k == "chip name" and first:
            break  # the mcu block
        first.setdefault(k, value)
    rated, cur = _float(first.get("aicore freq(mhz)", "")), _float(first.get("aicore curfreq(mhz)", ""))
    if rated is None and cur is None:
        raise NpuSmiParseError("no 'Aicore Freq(MHZ)' line in -t common output")
    return CommonReading(
        aicore_freq_mhz=int(rated) if rated is not None else None,
        aicore_cur_freq_mhz=int(cur) if cur is not None else None,
        aicore_util_pct=_float(first.get("aicore usage rate(%)", "")),
        temp_c=_float(first.get("temperature(c)", "")),
        power_w=_float(first.get("npu real-time power(w)", "")))


def query_ecc(program: str, npu: int, timeout: float, stats: Optional[NpuSmiStats] = STATS) -> EccCounts:
    return _query(program, ["info", "-t", "ecc", "-i", str(npu)], parse_ecc, timeout, stats)


def query_common(program: str, npu: int, timeout: float, stats: Optional[NpuSmiStats] = STATS) -> CommonReading:
    return _query(program, ["info", "-t", "common", "-i", str(npu)], parse_common, timeout, stats)


# --- what a health code asks for -------------------------------------------------------------

#: Actions, mildest first: each finding names one.
WATCH, DRAIN, ISOLATE = "watch", "drain_after_job", "isolate_now"
ACTIONS = (WATCH, DRAIN, ISOLATE)

#: Handling levels of the device plugin's fault table -> (what the level means, the action).
LEVELS: Dict[str, Tuple[str, str]] = {
    "NotHandleFault": ("recorded only, no handling needed", WATCH),
    "SubHealthFault": ("sub-health: the card still works but is degrading", WATCH),
    "RestartRequest": ("the current request must be re-run", WATCH),
    "RestartBusiness": ("the training job must be restarted", DRAIN),
    "FreeRestartNPU": ("the NPU must be reset once it is free", DRAIN),
    "RestartNPU": ("the NPU must be reset", DRAIN),
    "SeparateNPU": ("the NPU must be taken out of service", ISOLATE),
}

_CODES: Dict[str, List[str]] = {
    "SubHealthFault": "81A3880C 81AD8605 80E20207 81078605 80DE0207 8C2FA001 819B8605 80818C06 8C1F860A "
                      "80E18405".split(),
    "RestartBusiness": "8C204E00 A8028802 A4302003 A4302004 A4302005 A4302006 A4302009 A430200A A6301002 "
                       "B4060011 B406009C B4060008 B4060009 B406000E A60250A1 A2301001 A2301002 A2303001 "
                       "B4060006 B4060007 B406000D B4060014 B4060010 80E01801 81B38009 81B38004".split(),
    "FreeRestartNPU": "8C0E4E00 8C104E00 8C0C4E00 8C044E00 8C064E00 8C17A005 8C1DA005 8C19A005 8C0A4E00 "
                      "8C084E00 A4193217 A4193218 A42A0000 A42F3917 A42F3918 8C464E00 8C124E00".split(),
    "RestartNPU": "8C03A000 8C1FA006 40F84E00 80E24E00 80E21E01 80E38008 80E3A202 80E3A203 80E39200 "
                  "819B800A 80E2120D 80E78000 80E78008 80FA4E00 812E4E00 80C78008 80F78009 80F78008 "
                  "80F78003 80E18404 80FB8005 80A18008 80CD8008 80A38008 80A58008 80DE1801 80F18008 "
                  "80F18000 80F1800A 80CF8000 80DF8000 80DF8009 80DF8008 80DF800A 80F38008 80F2180D "
                  "80E18005 80E18008 80E1800A 812F8000 80B98000 80B98008 80BD8008 80CB8001 80E18000 "
                  "80E21008 80C98001 80E58005 80E58009 80E44E00 80CF8009 80CF8008 8C4BA00C 80E3A207".split(),
    "SeparateNPU": "80E3A201 80E18402 80E0020B 817F8002 816F8002 814F8002 9419321B A2301000 A2302001 "
                   "A4192C1A A4193216 A419321B A419321C A42F390F A42F3916 A42F391A A6183207 A62F3934 "
                   "A8028801 A819320F A8193234 A8193235 80818C00 80818C05 80DF8402 4C4BA00C".split(),
    "NotHandleFault": "81078603 8C2FA009 A4025021 A60250C1 A4025081 80E21007 80E38003 80E18400 80E01805 "
                      "80E18006 80DE1805 80DE1803".split(),
}
_LEVEL_OF: Dict[str, str] = {code: level for level, codes in _CODES.items() for code in codes}

#: Codes whose meaning the vendor's documents state (the rest are known by level only).
MEANINGS: Dict[str, str] = {
    "8C084E00": "ADDA heartbeat lost",
    "81078603": "RoCE link down (network port of the NPU)",
    "80E01801": "HBM multi-bit ECC error",
    "A4025021": "a device process exited abnormally",
}


@dataclass(frozen=True)
class CodeAdvice:
    code: str
    #: The vendor's handling level, "unknown" for a code not in its table.
    level: str
    meaning: str
    action: str


def advise(code: str, health: str = "") -> CodeAdvice:
    """What the vendor's table says about `code`. A code not in the table is judged by the
    chip's health word: Critical -> isolate, Alarm -> drain after the job, else watch."""
    code = code.upper().replace("0X", "")
    level = _LEVEL_OF.get(code)
    if level is not None:
        what, action = LEVELS[level]
        return CodeAdvice(code, level, MEANINGS.get(code, what), action)
    h = health.strip().upper()
    action = ISOLATE if h == "CRITICAL" else DRAIN if h == "ALARM" else WATCH
    return CodeAdvice(code, "unknown", MEANINGS.get(code, "not in the vendor's fault table"), action)
