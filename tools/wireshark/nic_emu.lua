-- Wireshark / tshark dissector for packet captures of the emulated NIC's
-- fabric (`cargo xtask sim FILE --pcap out.pcapng`).
--
--   wireshark -X lua_script:tools/wireshark/nic_emu.lua out.pcapng
--   tshark -X lua_script:tools/wireshark/nic_emu.lua -r out.pcapng -V
--
-- A capture is a pcapng file with one interface per directed link of the
-- fabric (interface number = link number, link type USER0 = 147, the
-- description naming its two ends: `node0 -> sw0.p0`). Each record is the
-- bytes on the wire at that link: route bytes (bit 7 set, one per switch
-- still to cross), the 48-byte packet header, the payload. What the link
-- did to the packet is the record's comment (`nicemu: dropped`,
-- `corrupted`, `duplicated`, `link down`). docs/capture.md describes the
-- file; docs/hardware.md section 10 the packet header.

local cap = Proto("nicemu_capture", "NIC emulator capture")
local pkt = Proto("nicemu", "NIC emulator packet")

local ends = { [0] = "NIC", [1] = "switch" }
local ptypes = {
    [1] = "Data", [2] = "Ack", [3] = "Nack", [4] = "Put",
    [5] = "GetReq", [6] = "GetResp", [7] = "Report", [8] = "Poll",
    [9] = "Stat", [10] = "Ustat", [11] = "EchoRequest", [12] = "EchoReply",
    [13] = "Coll", [14] = "CollCtl",
}
-- Types that carry a sequence number of their stream.
local sequenced = { [1] = true, [4] = true, [5] = true, [6] = true, [7] = true }
local nacks = {
    [1] = "OutOfOrder", [2] = "NoBuffer", [3] = "PortClosed",
    [4] = "RemoteAccess", [5] = "Busy", [6] = "Unsynced",
}
local schemes = { [0] = "host", [1] = "nic", [2] = "assisted", [3] = "nic-cached" }
local algorithms = {
    [0] = "separate", [1] = "serial", [2] = "binomial", [3] = "binary", [4] = "k-binomial",
}

-- What the link did, as bits of `nicemu_capture.what`.
local DROPPED, CORRUPTED, DUPLICATED, LINK_DOWN = 1, 2, 4, 8

local cf = {
    link = ProtoField.uint16("nicemu_capture.link", "Link"),
    what = ProtoField.uint8("nicemu_capture.what", "Link did", base.HEX),
    dropped = ProtoField.bool("nicemu_capture.dropped", "Dropped"),
    corrupted = ProtoField.bool("nicemu_capture.corrupted", "Bit flipped"),
    duplicated = ProtoField.bool("nicemu_capture.duplicated", "Delivered twice"),
    link_down = ProtoField.bool("nicemu_capture.link_down", "Link down"),
    from_kind = ProtoField.uint8("nicemu_capture.from_kind", "From", base.DEC, ends),
    from_port = ProtoField.uint8("nicemu_capture.from_port", "From port"),
    from_id = ProtoField.uint16("nicemu_capture.from_id", "From number"),
    to_kind = ProtoField.uint8("nicemu_capture.to_kind", "To", base.DEC, ends),
    to_port = ProtoField.uint8("nicemu_capture.to_port", "To port"),
    to_id = ProtoField.uint16("nicemu_capture.to_id", "To number"),
}
cap.fields = cf

local ce = {
    dropped = ProtoExpert.new("nicemu_capture.expert.dropped", "The link dropped this packet",
        expert.group.SEQUENCE, expert.severity.WARN),
    corrupted = ProtoExpert.new("nicemu_capture.expert.corrupted",
        "The link flipped a bit of this packet (its CRC no longer matches)",
        expert.group.CHECKSUM, expert.severity.ERROR),
    duplicated = ProtoExpert.new("nicemu_capture.expert.duplicated",
        "The link delivers this packet twice", expert.group.SEQUENCE, expert.severity.NOTE),
}
cap.experts = ce

local f_iface = Field.new("frame.interface_id")
local f_desc = Field.new("frame.interface_description")
local f_comment = Field.new("frame.comment")

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
    retransmission = ProtoField.bool("nicemu.retransmission", "Retransmission"),
}
pkt.fields = pf

local pe = {
    retransmission = ProtoExpert.new("nicemu.expert.retransmission",
        "Retransmission (this stream already carried this sequence number or a later one on this link)",
        expert.group.SEQUENCE, expert.severity.NOTE),
}
pkt.experts = pe

local HEADER_LEN = 48

-- A link end as the interface description names it: `node3` (a NIC) or
-- `sw1.p7` (switch 1, port 7). Returns kind, number, port (nil: unknown).
local function parse_end(s)
    local n = s:match("^node(%d+)$")
    if n then
        return 0, tonumber(n), 0
    end
    local sw, port = s:match("^sw(%d+)%.p(%d+)$")
    if sw then
        return 1, tonumber(sw), tonumber(port)
    end
    return nil
end

-- What the link did, from the record's comments.
local function what_of_comments()
    local what = 0
    for _, c in ipairs({ f_comment() }) do
        local text = tostring(c.value)
        if text:find("^nicemu:") then
            if text:find("dropped") then what = bit32.bor(what, DROPPED) end
            if text:find("corrupted") then what = bit32.bor(what, CORRUPTED) end
            if text:find("duplicated") then what = bit32.bor(what, DUPLICATED) end
            if text:find("link down") then what = bit32.bor(what, LINK_DOWN) end
        end
    end
    return what
end

-- The link the record being dissected was captured on (for `nicemu`'s
-- retransmission analysis) and what it did.
local current_link = 0
local current_what = 0

function cap.dissector(tvb, pinfo, tree)
    pinfo.cols.protocol = "NICEMU"
    local iface = f_iface()
    local link = iface and iface.value or 0
    local desc = f_desc()
    desc = desc and tostring(desc.value) or ""
    local from_s, to_s = desc:match("^(%S+) %-> (%S+)$")
    local what = what_of_comments()
    current_link, current_what = link, what
    local here = tvb(0, 0)
    local t = tree:add(cap, here)
    t:set_generated()
    t:add(cf.link, here, link):set_generated()
    local w = t:add(cf.what, here, what)
    w:set_generated()
    w:add(cf.dropped, here, bit32.band(what, DROPPED) ~= 0):set_generated()
    w:add(cf.corrupted, here, bit32.band(what, CORRUPTED) ~= 0):set_generated()
    w:add(cf.duplicated, here, bit32.band(what, DUPLICATED) ~= 0):set_generated()
    w:add(cf.link_down, here, bit32.band(what, LINK_DOWN) ~= 0):set_generated()
    local fk, fid, fp = parse_end(from_s or "")
    local tk, tid, tp = parse_end(to_s or "")
    if fk then
        t:add(cf.from_kind, here, fk):set_generated()
        t:add(cf.from_port, here, fp):set_generated()
        t:add(cf.from_id, here, fid):set_generated()
    end
    if tk then
        t:add(cf.to_kind, here, tk):set_generated()
        t:add(cf.to_port, here, tp):set_generated()
        t:add(cf.to_id, here, tid):set_generated()
    end
    t:append_text(": link " .. link .. ", " .. desc)
    if from_s then
        pinfo.cols.src = from_s
        pinfo.cols.dst = to_s
    end
    if bit32.band(what, DROPPED) ~= 0 then
        local why = bit32.band(what, LINK_DOWN) ~= 0 and " (the link was down)" or ""
        t:add_proto_expert_info(ce.dropped, "The link dropped this packet" .. why)
    end
    if bit32.band(what, CORRUPTED) ~= 0 then
        t:add_proto_expert_info(ce.corrupted)
    end
    if bit32.band(what, DUPLICATED) ~= 0 then
        t:add_proto_expert_info(ce.duplicated)
    end
    if tvb:len() > 0 then
        pkt.dissector:call(tvb, pinfo, tree)
    end
    local marks = {}
    if bit32.band(what, DROPPED) ~= 0 then marks[#marks + 1] = "DROPPED" end
    if bit32.band(what, CORRUPTED) ~= 0 then marks[#marks + 1] = "CORRUPTED" end
    if bit32.band(what, DUPLICATED) ~= 0 then marks[#marks + 1] = "DUPLICATED" end
    if #marks > 0 then
        pinfo.cols.info:prepend("[" .. table.concat(marks, " ") .. "] ")
    end
    return tvb:len()
end

-- Retransmission analysis. Per link and stream (source node and port,
-- destination node and port, priority): the highest sequence number a
-- data-bearing packet carried on that link so far, and the sending NIC's
-- boot nonce (`sync_boot` of its SYNC packets). A data-bearing packet
-- whose sequence number is not above that highest one is a
-- retransmission; a SYNC packet with another boot nonce starts the
-- stream afresh (the sender was reset). Results are kept per frame, so a
-- second pass (Wireshark's GUI) shows what the first, in-order pass saw.
local highest = {}
local retransmitted = {}

function pkt.init()
    highest = {}
    retransmitted = {}
end

local function is_retransmission(pinfo, h, ptype, flags)
    if pinfo.visited then
        return retransmitted[pinfo.number] == true
    end
    if not sequenced[ptype] then
        return false
    end
    local key = string.format("%d|%d:%d>%d:%d|%d", current_link, h(4, 2):le_uint(),
        h(8, 1):uint(), h(6, 2):le_uint(), h(9, 1):uint(), h(2, 1):uint())
    local seq = h(12, 4):le_uint()
    local boot = h(30, 2):le_uint()
    local st = highest[key]
    local sync = bit32.band(flags, 0x08) ~= 0
    if st and sync and st.boot ~= nil and st.boot ~= boot then
        st = nil
    end
    local again = false
    if st == nil then
        st = { seq = seq, boot = sync and boot or nil }
        highest[key] = st
    else
        -- Sequence numbers wrap: compare modulo 2^32.
        local ahead = (seq - st.seq) % 4294967296
        if ahead == 0 or ahead >= 2147483648 then
            again = true
        else
            st.seq = seq
        end
        if sync then
            st.boot = boot
        end
    end
    retransmitted[pinfo.number] = again
    return again
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
    local again = is_retransmission(pinfo, h, ptype, flags)
    if sequenced[ptype] then
        local r = t:add(pf.retransmission, h(12, 4), again)
        r:set_generated()
        if again then
            r:add_proto_expert_info(pe.retransmission)
        end
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
    if again then
        info = "[Retransmission] " .. info
    end
    pinfo.cols.info = info
    return n
end

DissectorTable.get("wtap_encap"):add(wtap.USER0, cap)
