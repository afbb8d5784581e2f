"""Exit statuses of processes the daemon is not the parent of: the kernel's process-events connector.

Why: a rank that exits 1 without a word, or is killed by a signal, leaves nothing in any log and
no status the daemon could `waitpid` for (the launcher is its parent). Linux reports every
process exit, with its wait status, to root over netlink (NETLINK_CONNECTOR, the proc connector's
multicast group). One listener thread per daemon keeps the last exits in a bounded table that the
process probe reads when ranks leave. Where the connector is unavailable (not root, a kernel
without CONFIG_PROC_EVENTS, a container without CAP_NET_ADMIN) `unavailable` says why and the
daemon falls back to what /proc and the launchers' lines show (`npu-watchdog doctor` says which).

Stdlib only (`socket.AF_NETLINK`); the record layout is the kernel's (linux/connector.h,
linux/cn_proc.h): nlmsghdr (16 bytes), cn_msg (20), proc_event header (16), then for
PROC_EVENT_EXIT: pid, tgid, exit_code (the wait status), exit_signal.

Cost: the connector multicasts every fork, exec, exit and rename of every thread on the host.
Waking the daemon for each cost most of its idle CPU on a busy node (a pip install beside it,
dataloader workers, a compiler), so a classic BPF filter on the socket lets the kernel drop all
but the exits of whole processes (pid == tgid) before they reach the daemon.
"""

from __future__ import annotations

import array
import errno
import logging
import os
import select
import socket
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple

from watchdog.host import clock

log = logging.getLogger(__name__)

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_EXIT = 0x80000000
NLMSG_DONE = 3
_NLMSG = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT = struct.Struct("=IIQ")
_EXIT = struct.Struct("=iiII")
SO_ATTACH_FILTER = 26  # asm-generic/socket.h: the same on x86_64 and aarch64
_HEAD = _NLMSG.size + _CN_MSG.size  # where proc_event starts


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


#: Most pids one filter names (two instructions each, within the kernel's 4096); a larger
#: watched set falls back to every process exit.
MAX_FILTER_PIDS = 1500


def _net_order(value: int) -> int:
    """A host-order u32 as a BPF word load sees it (loads read network byte order)."""
    return struct.unpack(">I", struct.pack("=I", value & 0xFFFFFFFF))[0]


def exit_filter(pids: Optional[Iterable[int]] = None) -> bytes:
    """The classic BPF program (struct sock_filter[]) that accepts exit events of thread-group
    leaders only, and with `pids` only those of these processes (the ranks and launchers the
    daemon watches: the exits of the rest of the host never wake it). pid == tgid compares two
    loads read the same way, so only constants need `_net_order`."""
    ld_w_abs, st, ldx_mem, jeq_k, jeq_x, ret_k = 0x20, 0x02, 0x61, 0x15, 0x1D, 0x06
    accept, drop = _bpf(ret_k, 0, 0, 0xFFFF), _bpf(ret_k, 0, 0, 0)
    pid_at = _HEAD + _EVENT.size
    prog = [
        _bpf(ld_w_abs, 0, 0, _HEAD),                       # A = proc_event.what
        _bpf(jeq_k, 1, 0, _net_order(PROC_EVENT_EXIT)),    # an exit -> on
        drop,
        _bpf(ld_w_abs, 0, 0, pid_at + 4),                  # A = tgid
        _bpf(st, 0, 0, 0),                                 # M[0] = A
        _bpf(ldx_mem, 0, 0, 0),                            # X = M[0]
        _bpf(ld_w_abs, 0, 0, pid_at),                      # A = pid
        _bpf(jeq_x, 1, 0, 0),                              # pid == tgid -> on
        drop,
    ]
    if pids is None:
        return b"".join(prog + [accept])
    for pid in sorted(set(pids)):
        prog += [_bpf(jeq_k, 0, 1, _net_order(pid)), accept]  # this pid -> accept, else the next
    return b"".join(prog + [drop])


def attach_exit_filter(sock: socket.socket, pids: Optional[Iterable[int]] = None) -> Optional[str]:
    """Install `exit_filter` on the socket (replacing any); None, or why not (the listener then
    filters in Python). A set larger than MAX_FILTER_PIDS takes every process exit."""
    wanted = None if pids is None else frozenset(pids)
    if wanted is not None and len(wanted) > MAX_FILTER_PIDS:
        wanted = None
    prog = array.array("B", exit_filter(wanted))  # the kernel copies it at attach: alive until then
    fprog = struct.pack("HL", len(prog) // 8, prog.buffer_info()[0])  # struct sock_fprog
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


#: Receive buffer asked for: room for a burst of exits while the listener waits for the GIL.
RCVBUF = 1 << 20
#: After an overrun the buffer grows 4x, up to this: a node whose bursts overran it once will
#: again, and a few MB of kernel memory are cheaper than exit statuses lost.
MAX_RCVBUF = 16 << 20
#: Exits remembered (the newest win); a node runs far fewer processes between two probe rounds.
MAX_EXITS = 8192


def _set_rcvbuf(sock: socket.socket, size: int) -> int:
    """Ask for a receive buffer of `size` bytes; the size the kernel gives (it doubles the ask).
    SO_RCVBUFFORCE first: the connector needs CAP_NET_ADMIN anyway, which lifts the cap of
    net.core.rmem_max (a plain SO_RCVBUF is capped there: 212992 bytes by default, socket(7))."""
    for opt in [o for o in (getattr(socket, "SO_RCVBUFFORCE", None), socket.SO_RCVBUF) if o is not None]:
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, size)
            break
        except OSError:
            pass
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    except OSError:
        return 0


@dataclass(frozen=True)
class ProcExit:
    """One process (thread-group leader) exit: its pid, the wait status word, and when it was read."""

    pid: int
    status: int
    time: float


def parse_exit_event(data: bytes) -> Optional[ProcExit]:
    """A received netlink datagram -> the process exit it reports, or None (another event, a
    thread's exit, or a short or malformed record)."""
    head = _HEAD
    if len(data) < head + _EVENT.size + _EXIT.size:
        return None
    idx, val = _CN_MSG.unpack_from(data, _NLMSG.size)[:2]
    if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC):
        return None
    what = _EVENT.unpack_from(data, head)[0]
    if what != PROC_EVENT_EXIT:
        return None
    pid, tgid, code, _sig = _EXIT.unpack_from(data, head + _EVENT.size)
    if pid != tgid or pid <= 0:
        return None  # a thread, not the process
    return ProcExit(pid=pid, status=code, time=clock.now())


def _unreadable(exc: BaseException) -> str:
    return (f"the kernel's process events are not readable here ({type(exc).__name__}: {exc}); "
            "exit statuses come from /proc and the launchers' lines only")


def _close_all(sock: socket.socket, wake: Tuple[int, int]) -> None:
    sock.close()
    for fd in wake:
        try:
            os.close(fd)
        except OSError:
            pass


def _listen_message() -> bytes:
    body = struct.pack("=I", PROC_CN_MCAST_LISTEN)
    cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(body), 0) + body
    return _NLMSG.pack(_NLMSG.size + len(cn), NLMSG_DONE, 0, 0, os.getpid()) + cn


class ProcExits:
    """The listener: `start()` subscribes and reads in a daemon thread; `get(pid)` is the newest
    exit of that pid (None: not seen, or the listener is not running).

    Only the reading thread closes the socket (`close()` wakes it through a pipe): closed from
    another thread, the socket's descriptor number could be handed to a new listener's socket
    while the old thread was about to read it again, and the old thread then took the new
    listener's events (a reloaded probe's first exits were lost that way)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exits: "OrderedDict[int, ProcExit]" = OrderedDict()
        self._sock: Optional[socket.socket] = None
        self._wake: Optional[Tuple[int, int]] = None  # (read end, write end): close() -> reader
        self._reading = False
        self.unavailable: Optional[str] = "not started"
        #: Process exits kept, and datagrams read at all (the kernel filter keeps them equal).
        self.received = 0
        self.datagrams = 0
        #: Times the kernel reported dropped events (ENOBUFS): a burst overran the buffer.
        self.overruns = 0
        #: The receive buffer's size as the kernel reports it (grown after each overrun).
        self.rcvbuf = 0
        #: Why the kernel-side filter is not installed (None: installed).
        self.unfiltered: Optional[str] = "not started"
        self._watched: Optional[frozenset] = None

    @classmethod
    def start(cls, pids: Optional[Iterable[int]] = None, listen: bool = True) -> "ProcExits":
        """Subscribe; with `pids`, the filter names them from the first event on (see `watch`);
        `listen=False` leaves the reading to a later `listen()`."""
        self = cls()
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        except (OSError, AttributeError) as exc:
            self.unavailable = _unreadable(exc)
            return self
        try:
            if pids is not None:
                self._watched = frozenset(pids)
            # The filter before the group: bound first, the socket took every event (threads'
            # exits, forks) sent in between while another listener on the host had events on.
            self.unfiltered = attach_exit_filter(sock, self._watched)
            sock.bind((0, CN_IDX_PROC))  # port id 0: the kernel assigns one (several daemons per host)
            # (if neither option takes, the default buffer: a burst may overrun it, see `_read`)
            self.rcvbuf = _set_rcvbuf(sock, RCVBUF)
            sock.send(_listen_message())
            self._wake = os.pipe()
        except OSError as exc:
            sock.close()
            self.unavailable = _unreadable(exc)
            return self
        self._sock, self.unavailable = sock, None
        if listen:
            self.listen()
        return self

    def listen(self) -> None:
        """Start the reading thread."""
        with self._lock:
            if self._sock is None or self._reading:
                return
            self._reading = True
        threading.Thread(target=self._run, name="proc-events", daemon=True).start()

    def _run(self) -> None:
        sock, wake = self._sock, self._wake
        assert sock is not None and wake is not None
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        poller.register(wake[0], select.POLLIN)
        try:
            while True:  # close() ends it through the pipe, a failed socket through `_read`
                ready = {fd for fd, _ in poller.poll()}
                if wake[0] in ready or not self._read(sock):
                    return
        finally:
            with self._lock:  # close() then finds no socket: it never writes to a closed pipe
                if self._sock is sock:
                    self._sock = None
                self._reading = False
            _close_all(sock, wake)

    def _read(self, sock: socket.socket) -> bool:
        """One datagram (or none, without waiting) into the table; False: the socket failed."""
        try:
            data = sock.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                if self._sock is sock:
                    self.unavailable = f"the process-events socket failed ({type(exc).__name__}: {exc})"
                return False
            # The kernel dropped events while the buffer was full (a burst of exits the listener
            # could not keep up with): those statuses are lost, the socket is fine.
            self.overruns += 1
            if self.rcvbuf < MAX_RCVBUF:
                self.rcvbuf = _set_rcvbuf(sock, min(MAX_RCVBUF, max(self.rcvbuf, 4096) * 2))
            if self.overruns == 1 or self.overruns % 100 == 0:
                log.warning("process events: the kernel dropped exit events (a burst overran the "
                            "buffer, %d times so far; it now holds %d bytes): a rank that ended in "
                            "it is judged without its exit status", self.overruns, self.rcvbuf)
            return True
        self.datagrams += 1
        ev = parse_exit_event(data)
        if ev is not None:
            with self._lock:
                self.received += 1
                self._exits.pop(ev.pid, None)
                self._exits[ev.pid] = ev
                while len(self._exits) > MAX_EXITS:
                    self._exits.popitem(last=False)
        return True

    def watch(self, pids: Iterable[int]) -> None:
        """Only these processes' exits are wanted from now on: the kernel drops the others. The
        table keeps what it has; a set larger than MAX_FILTER_PIDS takes every process exit."""
        wanted = frozenset(pids)
        with self._lock:
            sock = self._sock
            if sock is None or wanted == self._watched:
                return
            self._watched = wanted
            self.unfiltered = attach_exit_filter(sock, wanted)

    def close(self) -> None:
        """Stop listening (a reconfigured probe's spare listener). The reading thread closes
        the socket itself; a listener that never read is closed here."""
        with self._lock:
            sock, self._sock = self._sock, None
            if sock is None or self._wake is None:
                return
            self.unavailable = "closed"
            if self._reading:
                os.write(self._wake[1], b"x")  # the reader closes both; the pipe is empty: never blocks
                return
        _close_all(sock, self._wake)

    def get(self, pid: int) -> Optional[ProcExit]:
        with self._lock:
            return self._exits.get(pid)

    def of(self, pids: Iterable[int]) -> Dict[int, ProcExit]:
        with self._lock:
            return {p: self._exits[p] for p in pids if p in self._exits}
