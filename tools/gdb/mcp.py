# gdb command `mcp`: the MCP's four state machines, their queues and the
# NIC's counters in one view. Loaded by `cargo xtask gdb` (gdb `source`);
# works with any gdb that has Python and the MCP image's symbols loaded.
#
#   mcp          the current inferior (NIC)
#   mcp all      every inferior that is attached to a NIC
#   mcp-label N  call the current inferior "node N" (xtask gdb does this)
#
# The field names are the firmware's (firmware/mcp/src: `Mcp`, `Sdma`,
# `Send`, `Recv`, `Rdma`), read through the image's DWARF; the counters
# are the STATS block in SRAM (firmware/abi/src/stats.rs, map.rs), read
# from guest memory. xtask's unit tests check that the constants below
# match the ABI.

import gdb

# Guest address of SRAM offset 0 (QEMU virt's RAM base) plus the STATS
# block's SRAM offset (nic_abi::map::STATS).
GUEST_RAM_BASE = 0x80000000
STATS = 0x43000
# nic_abi::stats::ALL_STATS, in order (u64 words from STATS).
STAT_NAMES = [
    "PacketsSent", "PacketsReceived", "Retransmits", "Drops", "Errors",
    "CrcErrors", "Duplicates", "OutOfOrder", "BadHeaders", "AcksSent",
    "NacksSent", "Timeouts", "MessagesReceived", "MessagesSent", "NoBuffer",
    "Polls", "ControlDrops", "McastForwarded", "McastTreeOps",
    "McastReports", "McastCompleted", "McastBusy", "RetxTimeout", "RetxGap",
    "RetxNoBuffer", "RetxRefused", "RetxResync", "PollsSent", "StreamsEvicted",
    "TlbHits", "TlbMisses", "TlbEvictions", "RetxBytes", "StatsSent",
    "UstatsSent", "Held",
]
# The counters the one view shows.
SHOWN = [
    "PacketsSent", "PacketsReceived", "MessagesSent", "MessagesReceived",
    "Retransmits", "Drops", "Errors", "Timeouts", "Polls",
]
MACHINES = ["SDMA", "SEND", "RECV", "RDMA"]

# inferior number -> node number (from `mcp-label`).
NODES = {}


def _eval(expr):
    return gdb.parse_and_eval(expr)


def _int(expr):
    try:
        return int(_eval(expr))
    except gdb.error:
        return None


def _state(field):
    """A machine's `state` as Rust prints it, without the module path."""
    v = _eval("mcp_image::MCP.%s.state" % field)
    s = str(v)
    # mcp::sdma::SdmaState::FillWait{token: 1, ...} -> FillWait{token: 1, ...}
    head, brace, rest = s.partition("{")
    if "::" in head:
        head = head.rsplit("::", 1)[1]
    return head + brace + rest


def _ring_len(expr):
    """How many items a `Ring` (firmware/mcp/src/ring.rs) holds."""
    return _int(expr + ".len")


def _fmt(pairs):
    return ", ".join("%s %s" % (k, "?" if v is None else v) for k, v in pairs)


def _queues():
    # The fields of firmware/mcp/src: sdma/mod.rs `Sdma`, send.rs `Send`,
    # recv/mod.rs `Recv`, rdma/mod.rs `Rdma`; pool.rs `Pool` (live records),
    # heapless 0.8's Vec (`len`) and ring.rs `Ring` (`len`).
    m = "mcp_image::MCP"
    sdma = [
        ("conn queue", _int(m + ".sdma.conn_queue_len")),
        ("active streams", _int(m + ".sdma.active_tx.len")),
        ("tx streams", _int(m + ".sdma.txs.pool.live")),
    ]
    prod, done = _int(m + ".send.prod"), _int(m + ".send.done")
    send = [
        ("in flight", _ring_len(m + ".send.in_flight")),
        ("queued", None if prod is None or done is None else (prod - done) % (1 << 32)),
    ]
    seen, cons = _int(m + ".recv.seen_prod"), _int(m + ".recv.cons")
    recv = [
        ("unread packets", None if seen is None or cons is None else (seen - cons) % (1 << 32)),
        ("acks due", _int(m + ".recv.ack_list.len")),
        ("rx streams", _int(m + ".recv.rxs.live")),
    ]
    hprod, hdone = _int(m + ".shared.hdma.prod"), _int(m + ".shared.hdma.done")
    rdma = [
        ("host-DMA commands",
         None if hprod is None or hdone is None else (hprod - hdone) % (1 << 32)),
        ("bytes left", _int(m + ".rdma.bytes_left")),
    ]
    return [sdma, send, recv, rdma]


def _stats():
    inf = gdb.selected_inferior()
    try:
        raw = bytes(inf.read_memory(GUEST_RAM_BASE + STATS, 8 * len(STAT_NAMES)))
    except gdb.MemoryError as e:
        return None, str(e)
    vals = [int.from_bytes(raw[i * 8:i * 8 + 8], "little") for i in range(len(STAT_NAMES))]
    return dict(zip(STAT_NAMES, vals)), None


def show_current():
    inf = gdb.selected_inferior()
    node = NODES.get(inf.num)
    title = "NIC %s" % ("?" if node is None else node)
    conn = getattr(inf, "connection", None)
    where = ", %s" % conn.details if conn is not None and conn.details else ""
    print("%s (inferior %d%s)" % (title, inf.num, where))
    if inf.pid == 0:
        print("  not attached")
        return
    lang = gdb.parameter("language")
    gdb.execute("set language rust", to_string=True)
    try:
        fields = ["sdma", "send", "recv", "rdma"]
        for name, field, q in zip(MACHINES, fields, _queues()):
            try:
                st = _state(field)
            except gdb.error as e:
                st = "? (%s)" % e
            print("  %-4s  %-28s %s" % (name, st, _fmt(q)))
    finally:
        gdb.execute("set language %s" % lang, to_string=True)
    stats, err = _stats()
    if stats is None:
        print("  counters: unreadable (%s)" % err)
    else:
        print("  counters: " + _fmt([(k, stats[k]) for k in SHOWN]))


class McpCommand(gdb.Command):
    """The MCP's machines (SDMA, SEND, RECV, RDMA: state and queues) and
the NIC's counters. `mcp` for the current inferior, `mcp all` for every
attached one."""

    def __init__(self):
        super().__init__("mcp", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        arg = arg.strip()
        if arg not in ("", "all"):
            raise gdb.GdbError("mcp: unknown argument `%s` (none, or `all`)" % arg)
        if arg == "":
            show_current()
            return
        here = gdb.selected_inferior().num
        # Switching inferiors announces itself ("[Switching to ...]");
        # gdb 12 and later can keep that quiet.
        try:
            quiet = gdb.parameter("suppress-cli-notifications")
            gdb.execute("set suppress-cli-notifications on", to_string=True)
        except (gdb.error, RuntimeError):
            quiet = None
        try:
            for inf in sorted(gdb.inferiors(), key=lambda i: i.num):
                if inf.pid == 0:
                    continue
                gdb.execute("inferior %d" % inf.num, to_string=True)
                show_current()
        finally:
            gdb.execute("inferior %d" % here, to_string=True)
            if quiet is not None:
                gdb.execute(
                    "set suppress-cli-notifications %s" % ("on" if quiet else "off"),
                    to_string=True,
                )


class McpLabelCommand(gdb.Command):
    """mcp-label N: the current inferior is NIC (node) N, for `mcp`'s title."""

    def __init__(self):
        super().__init__("mcp-label", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        try:
            node = int(arg.strip())
        except ValueError:
            raise gdb.GdbError("mcp-label: `%s` is not a node number" % arg.strip())
        NODES[gdb.selected_inferior().num] = node


McpCommand()
McpLabelCommand()
