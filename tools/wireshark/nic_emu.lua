-- Wireshark / tshark dissector for packet captures of the emulated NIC's
-- fabric (`cargo xtask sim FILE --pcap out.pcap`).
--
--   wireshark -X lua_script:tools/wireshark/nic_emu.lua out.pcap
--   tshark -X lua_script:tools/wireshark/nic_emu.lua -r out.pcap -V
--
-- A capture's link type is USER0 (147). Each record is the capture header
-- (12 bytes: version, what the link did, link number, from, to), then the
-- bytes on the wire at that link: route bytes (bit 7 set, one per switch
-- still to cross), the 48-byte packet header, the payload. docs/capture.md
-- describes both; docs/hardware.md section 10 the packet header.

local cap = Proto("nicemu_capture", "NIC emulator capture header")
local pkt = Proto("nicemu", "NIC emulator packet")

local ends = { [0] = "NIC", [1] = "switch" }
local ptypes = {
    [1] = "Data", [2] = "Ack", [3] = "Nack", [4] = "Put",
    [5] = "GetReq", [6] = "GetResp", [7] = "Report", [8] = "Poll",
    [9] = "Stat", [10] = "Ustat",
}
local nacks = {
    [1] = "OutOfOrder", [2] = "NoBuffer", [3] = "PortClosed",
    [4] = "RemoteAccess", [5] = "Busy", [6] = "Unsynced",
}
local schemes = { [0] = "host", [1] = "nic", [2] = "assisted", [3] = "nic-cached" }
local algorithms = {
    [0] = "separate", [1] = "serial", [2] = "binomial", [3] = "binary", [4] = "k-binomial",
}

local cf = {
    version = ProtoField.uint8("nicemu_capture.version", "Version"),
    what = ProtoField.uint8("nicemu_capture.what", "Link did", base.HEX),
    dropped = ProtoField.bool("nicemu_capture.dropped", "Dropped", 8, nil, 0x01),
    corrupted = ProtoField.bool("nicemu_capture.corrupted", "Bit flipped", 8, nil, 0x02),
    duplicated = ProtoField.bool("nicemu_capture.duplicated", "Delivered twice", 8, nil, 0x04),
    link = ProtoField.uint16("nicemu_capture.link", "Link"),
    from_kind = ProtoField.uint8("nicemu_capture.from_kind", "From", base.DEC, ends),
    from_port = ProtoField.uint8("nicemu_capture.from_port", "From port"),
    from_id = ProtoField.uint16("nicemu_capture.from_id", "From number"),
    to_kind = ProtoField.uint8("nicemu_capture.to_kind", "To", base.DEC, ends),
    to_port = ProtoField.uint8("nicemu_capture.to_port", "To port"),
    to_id = ProtoField.uint16("nicemu_capture.to_id", "To number"),
}
cap.fields = cf

local pf = {
    route = ProtoField.bytes("nicemu.route", "Route bytes"),
    ptype = ProtoField.uint8("nicemu.type", "Type", base.DEC, ptypes),
    flags = ProtoField.uint8("nicemu.flags", "Flags", base.HEX),
    first = ProtoField.bool("nicemu.flags.first", "FIRST", 8, nil, 0x01),
    last = ProtoField.bool("nicemu.flags.last", "LAST", 8, nil, 0x02),
    ack_valid = ProtoField.bool("nicemu.flags.ack_valid", "ACK_VALID", 8, nil, 0x04),
    sync = ProtoField.bool("nicemu.flags.sync", "SYNC", 8, nil, 0x08),
    mcast = ProtoField.bool("nicemu.flags.mcast", "MCAST", 8, nil, 0x10),
    incarnation_flag = ProtoField.bool("nicemu.flags.incarnation", "INCARNATION", 8, nil, 0x20),
    incarnation = ProtoField.uint32("nicemu.incarnation", "Stream incarnation"),
    priority = ProtoField.uint8("nicemu.priority", "Priority", base.DEC, { [0] = "low", [1] = "high" }),
    nack_code = ProtoField.uint8("nicemu.nack_code", "Nack code", base.DEC, nacks),
    round = ProtoField.uint8("nicemu.round", "Round (sender's rewinds, low byte)"),
    echo = ProtoField.uint32("nicemu.echo", "Round of the packet that drew it"),
    unsent = ProtoField.uint32("nicemu.unsent", "First seq not yet on the wire"),
    src_node = ProtoField.uint16("nicemu.src_node", "Source node"),
    dst_node = ProtoField.uint16("nicemu.dst_node", "Destination node"),
    src_port = ProtoField.uint8("nicemu.src_port", "Source port"),
    dst_port = ProtoField.uint8("nicemu.dst_port", "Destination port"),
    size_class = ProtoField.uint8("nicemu.size_class", "Size class"),
    sync_gen = ProtoField.uint8("nicemu.sync_gen", "Sync generation"),
    seq = ProtoField.uint32("nicemu.seq", "Sequence number"),
    ack = ProtoField.uint32("nicemu.ack", "Ack"),
    msg_len = ProtoField.uint32("nicemu.msg_len", "Message length"),
    offset = ProtoField.uint32("nicemu.offset", "Offset"),
    payload_len = ProtoField.uint16("nicemu.payload_len", "Payload length"),
    sync_boot = ProtoField.uint16("nicemu.sync_boot", "Sync boot"),
    remote = ProtoField.uint64("nicemu.remote", "Remote", base.HEX),
    cookie = ProtoField.uint32("nicemu.cookie", "Cookie"),
    crc = ProtoField.uint32("nicemu.crc", "CRC", base.HEX),
    group = ProtoField.uint16("nicemu.mcast.group", "Group"),
    mseq = ProtoField.uint32("nicemu.mcast.mseq", "Multicast number"),
    scheme = ProtoField.uint8("nicemu.mcast.scheme", "Scheme", base.DEC, schemes),
    algorithm = ProtoField.uint8("nicemu.mcast.algorithm", "Algorithm", base.DEC, algorithms),
    k = ProtoField.uint8("nicemu.mcast.k", "k"),
    subtree = ProtoField.uint16("nicemu.mcast.subtree", "Subtree size"),
    payload = ProtoField.bytes("nicemu.payload", "Payload"),
}
pkt.fields = pf

local HEADER_LEN = 48

local function end_name(kind, id, port)
    if kind == 0 then
        return "node" .. id
    end
    return "sw" .. id .. ".p" .. port
end

function cap.dissector(tvb, pinfo, tree)
    if tvb:len() < 12 then
        return 0
    end
    pinfo.cols.protocol = "NICEMU"
    local t = tree:add(cap, tvb(0, 12))
    t:add(cf.version, tvb(0, 1))
    local w = t:add(cf.what, tvb(1, 1))
    w:add(cf.dropped, tvb(1, 1))
    w:add(cf.corrupted, tvb(1, 1))
    w:add(cf.duplicated, tvb(1, 1))
    t:add_le(cf.link, tvb(2, 2))
    t:add(cf.from_kind, tvb(4, 1))
    t:add(cf.from_port, tvb(5, 1))
    t:add_le(cf.from_id, tvb(6, 2))
    t:add(cf.to_kind, tvb(8, 1))
    t:add(cf.to_port, tvb(9, 1))
    t:add_le(cf.to_id, tvb(10, 2))
    local from = end_name(tvb(4, 1):uint(), tvb(6, 2):le_uint(), tvb(5, 1):uint())
    local to = end_name(tvb(8, 1):uint(), tvb(10, 2):le_uint(), tvb(9, 1):uint())
    t:append_text(": link " .. tvb(2, 2):le_uint() .. ", " .. from .. " -> " .. to)
    pinfo.cols.src = from
    pinfo.cols.dst = to
    if tvb:len() > 12 then
        pkt.dissector:call(tvb(12):tvb(), pinfo, tree)
    end
    return tvb:len()
end

function pkt.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    local r = 0
    while r < n and tvb(r, 1):uint() >= 0x80 do
        r = r + 1
    end
    local t = tree:add(pkt, tvb())
    if r > 0 then
        t:add(pf.route, tvb(0, r))
    end
    if n - r < HEADER_LEN then
        t:append_text(" (truncated)")
        return n
    end
    local h = tvb(r):tvb()
    local ptype = h(0, 1):uint()
    local flags = h(1, 1):uint()
    t:add(pf.ptype, h(0, 1))
    local f = t:add(pf.flags, h(1, 1))
    f:add(pf.first, h(1, 1))
    f:add(pf.last, h(1, 1))
    f:add(pf.ack_valid, h(1, 1))
    f:add(pf.sync, h(1, 1))
    f:add(pf.mcast, h(1, 1))
    f:add(pf.incarnation_flag, h(1, 1))
    t:add(pf.priority, h(2, 1))
    -- Byte 3: a Nack's code; the sender's round on sequenced packets and
    -- polls. Byte 24 (`offset`): a Nack echoes the round of the packet
    -- that drew it; a Poll names the first seq not yet on the wire.
    if ptype == 3 then
        t:add(pf.nack_code, h(3, 1))
        t:add_le(pf.echo, h(24, 4))
    elseif ptype ~= 2 then
        t:add(pf.round, h(3, 1))
    end
    if ptype == 8 then
        t:add_le(pf.unsent, h(24, 4))
    end
    t:add_le(pf.src_node, h(4, 2))
    t:add_le(pf.dst_node, h(6, 2))
    t:add(pf.src_port, h(8, 1))
    t:add(pf.dst_port, h(9, 1))
    t:add(pf.size_class, h(10, 1))
    t:add(pf.sync_gen, h(11, 1))
    t:add_le(pf.seq, h(12, 4))
    if math.floor(h(1, 1):uint() / 0x20) % 2 == 1 then
        t:add_le(pf.incarnation, h(16, 4))
    else
        t:add_le(pf.ack, h(16, 4))
    end
    t:add_le(pf.msg_len, h(20, 4))
    t:add_le(pf.offset, h(24, 4))
    t:add_le(pf.payload_len, h(28, 2))
    t:add_le(pf.sync_boot, h(30, 2))
    t:add_le(pf.remote, h(32, 8))
    t:add_le(pf.cookie, h(40, 4))
    t:add_le(pf.crc, h(44, 4))
    local mcast = bit32.band(flags, 0x10) ~= 0 and (ptype == 1 or ptype == 7)
    if mcast then
        -- The McastTag in `remote` and the subtree size in `cookie`.
        local lo = h(32, 4):le_uint()
        local hi = h(36, 4):le_uint()
        local m = t:add(h(32, 12), "Multicast")
        m:add_le(pf.group, h(32, 2))
        m:add(pf.mseq, h(34, 4), bit32.bor(bit32.rshift(lo, 16), bit32.lshift(bit32.band(hi, 0xFFFF), 16)))
        m:add(pf.scheme, h(38, 1), bit32.band(bit32.rshift(hi, 16), 0xF))
        m:add(pf.algorithm, h(38, 1), bit32.band(bit32.rshift(hi, 20), 0xF))
        m:add(pf.k, h(39, 1))
        m:add_le(pf.subtree, h(40, 2))
    end
    local plen = h(28, 2):le_uint()
    if plen > 0 and h:len() > HEADER_LEN then
        t:add(pf.payload, h(HEADER_LEN, math.min(plen, h:len() - HEADER_LEN)))
    end
    local name = ptypes[ptype] or ("type " .. ptype)
    local info = string.format("%s %d:%d -> %d:%d seq=%d", name, h(4, 2):le_uint(), h(8, 1):uint(),
        h(6, 2):le_uint(), h(9, 1):uint(), h(12, 4):le_uint())
    if bit32.band(flags, 0x04) ~= 0 then
        info = info .. " ack=" .. h(16, 4):le_uint()
    end
    if ptype == 3 then
        info = info .. " " .. (nacks[h(3, 1):uint()] or "?")
    end
    if ptype == 8 then
        info = info .. " unsent=" .. h(24, 4):le_uint()
    end
    if (ptype == 9 or ptype == 10) and plen >= 16 and h:len() >= HEADER_LEN + 16 then
        -- Selective repeat: the poll answered (0 for a USTAT), how many
        -- ranges are missing, and the first of them.
        info = info .. " ps=" .. h(HEADER_LEN, 4):le_uint() .. " ranges=" .. h(HEADER_LEN + 12, 4):le_uint()
        if plen >= 24 and h:len() >= HEADER_LEN + 24 then
            info = info .. " first=" .. h(HEADER_LEN + 16, 4):le_uint() .. ".." .. h(HEADER_LEN + 20, 4):le_uint()
        end
    end
    if bit32.band(flags, 0x08) ~= 0 then
        info = info .. " SYNC"
    end
    if plen > 0 then
        info = info .. " len=" .. plen
    end
    pinfo.cols.info = info
    return n
end

DissectorTable.get("wtap_encap"):add(wtap.USER0, cap)
