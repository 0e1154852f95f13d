-- dcpdissect.lua: Couchbase DCP / MCBP dissector for Wireshark 4.0 to 4.6 (Lua 5.2 to 5.4).
-- Rendered from the dcpdissect protocol tables (dcpdissect/protocol/) by
-- `dcpdissect lua generate`; do not edit: change the tables or dcpdissect/luagen instead.
-- Install with `dcpdissect lua install` or load with `tshark -X lua_script:dcpdissect.lua`.
-- While loaded it owns the TCP ports of the preference dcp.tcp_ports (default 11210,11209),
-- replacing Wireshark's built-in couchbase dissector there.

local dcp = Proto("dcp", @PROTO_TITLE@)
local fmt, sbyte = string.format, string.byte
-- Bit operations through the BitOp library (`bit`) that every Wireshark ships, whatever its
-- Lua (Lua 5.2's own bit32 is gone from 5.4). BitOp's results are signed 32-bit numbers: u32
-- turns one into the unsigned value for display.
local band, bor, bnot, rshift = bit.band, bit.bor, bit.bnot, bit.rshift
local function u32(v)
  if v < 0 then return v + 4294967296 end
  return v
end
-- A whole number as text, the same in every Lua (tostring(5.0) is "5.0" from Lua 5.3 on);
-- a UInt64 (vbucket uuid, CAS, seqno) in decimal, as dcpdissect spells them everywhere.
local function int_text(v)
  if type(v) == "number" then return fmt("%d", v) end
  return tostring(v)
end

local function flagtext(bits, mask, v)
  local out = {}
  for i = 1, #bits do
    if band(v, bits[i][1]) ~= 0 then out[#out + 1] = bits[i][2] end
  end
  local unknown = band(v, bnot(mask))
  if unknown ~= 0 then out[#out + 1] = fmt("unknown:0x%x", u32(unknown)) end
  if #out == 0 then return "none" end
  return table.concat(out, "+")
end

--@TABLES@

local tvb_raw = Tvb.raw
local owned = {}      -- TCP port -> the dissector that had it before (false: none)

--@CHECKS@

-- Decoding ---------------------------------------------------------------------------------
-- Each tree item leaves two userdata (TreeItem, TvbRange) to collect. The collector runs
-- without pause and in large steps, so that garbage is freed while it is still in the CPU
-- caches: this keeps the cost per message flat over long captures (about 10% less CPU at
-- 100 MB). Wireshark has one Lua state, so the setting applies to every Lua plugin.
collectgarbage("setpause", 100)
collectgarbage("setstepmul", 1000)
-- Class methods fetched once: calling them directly skips the per-call method lookup
-- through each object's metatable.
local ti_add, ti_set_text, ti_append_text = TreeItem.add, TreeItem.set_text, TreeItem.append_text
local ti_set_generated, ti_expert = TreeItem.set_generated, TreeItem.add_proto_expert_info
local tvb_range, tvb_len, tvb_reported_len = Tvb.range, Tvb.len, Tvb.reported_len
local r_uint, r_uint64 = TvbRange.uint, TvbRange.uint64
local f_magic, f_opcode, f_server_opcode, f_keylen, f_framing_len = F.magic, F.opcode, F.server_opcode, F.keylen, F.framing_len
local f_extlen, f_datatype, f_vbucket, f_status, f_bodylen = F.extlen, F.datatype, F.vbucket, F.status, F.bodylen
local f_opaque, f_cas, f_extras, f_key, f_value_len, f_value = F.opaque, F.cas, F.extras, F.key, F.value_len, F.value
local tcp_completeness = Field.new("tcp.completeness")
local DOCUMENT_TEXT = gui_enabled ~= nil and gui_enabled()   -- JSON documents as text
-- Wireshark's built-in Couchbase dissector: every message that is not DCP (HELLO, SASL,
-- Get/Set, error maps, server pushes, ...) is also handed to it, so that it shows what it
-- always showed there and `couchbase.*` filters and colouring rules keep matching.
local builtin = nil
do
  local ok, d = pcall(Dissector.get, "couchbase")
  if ok then builtin = d end
end

local function layout_matches(lay, m)
  for i = 1, #lay.when do
    local k, v = lay.when[i][1], lay.when[i][2]
    local have
    if k == "status" then have = m.status else have = m.f[k] end
    if have ~= v then return false end
  end
  return true
end

-- Add every field of `lay` read at `base` (the caller checked the bounds); record values.
-- A flags field gets its flag names appended and one boolean item per defined bit, set or
-- not (so that `dcp.snapshot.flags.disk == 0` finds markers without it). The field named
-- `seqno` (the opcode's seqno) is also shown as dcp.by_seqno.
local function add_fields(tvb, tree, base, lay, vals, seqno)
  local fields = lay.fields
  for i = 1, #fields do
    local fd = fields[i]
    local r = tvb_range(tvb, base + fd.offset, fd.width)
    if fd.kept then
      if fd.width == 8 then vals[fd.name] = r_uint64(r) else vals[fd.name] = r_uint(r) end
    end
    local item = ti_add(tree, fd.field, r)
    local bits = fd.bits
    if bits then
      ti_append_text(item, " (" .. fd.text(r_uint(r)) .. ")")
      for j = 1, #bits do ti_add(item, bits[j][1], r) end
    end
    if fd.name == seqno then ti_add(tree, F.by_seqno, r) end
  end
end

-- Framing extras: (id << 4 | len) tags, nibble 0xF escapes to 15 + next byte.
local function dissect_frame_infos(tvb, tree, m, start, stop)
  local names = m.request and REQUEST_FRAME_INFO_NAMES or RESPONSE_FRAME_INFO_NAMES
  local sub = tree:add(F.frame_info, tvb(start, stop - start))
  sub:set_text(fmt("Framing extras (%d bytes)", stop - start))
  local pos, sid, sid_at, err, infos = start, nil, nil, nil, {}
  while pos < stop do
    local tag_at = pos
    local tag = tvb(pos, 1):uint()
    pos = pos + 1
    local fid, flen = rshift(tag, 4), band(tag, 0x0f)
    if fid == 0x0f then
      if pos >= stop then err = fmt("id escape byte missing at offset %d", pos - 1 - start) break end
      fid = 15 + tvb(pos, 1):uint()
      pos = pos + 1
    end
    if flen == 0x0f then
      if pos >= stop then err = fmt("length escape byte missing at offset %d", pos - 1 - start) break end
      flen = 15 + tvb(pos, 1):uint()
      pos = pos + 1
    end
    if pos + flen > stop then
      err = fmt("frame info %d length %d runs past the end (%d left)", fid, flen, stop - pos)
      break
    end
    local t = sub:add(tvb(tag_at, pos + flen - tag_at),
                      fmt("%s (id %d, %d bytes)", names[fid] or fmt("unknown:%d", fid), fid, flen))
    t:add(F.frame_info_id, tvb(tag_at, 1), fid):append_text(" (" .. (names[fid] or "unknown") .. ")")
    t:add(F.frame_info_len, tvb(tag_at, 1), flen)
    if flen > 0 then t:add(F.frame_info_data, tvb(pos, flen)) end
    infos[#infos + 1] = {fid, flen}
    if fid == STREAM_ID_INFO and flen == 2 and sid == nil then
      sid = tvb(pos, 2):uint()
      sid_at = pos
    end
    pos = pos + flen
  end
  m.frame_error = err
  if err == nil then
    m.infos = infos
    if sid ~= nil then
      m.stream_id = sid
      tree:add(F.stream_id, tvb(sid_at, 2))
    end
  end
end

local prefixes, n_prefixes = {}, 0   -- "DcpMutation vb:3" by magic, opcode, vbucket/status

local function printable(text)        -- bytes outside printable ASCII as \xNN
  return (string.gsub(text, "[^\32-\126]", function(c) return fmt("\\x%02x", sbyte(c)) end))
end

local function seqno_text(v)          -- a seqno, "max" for the largest
  if string.lower(v:tohex()) == "ffffffffffffffff" then return "max" end
  return int_text(v)
end

local function stream_request_text(f)
  return "start=" .. int_text(f.start_seqno) .. " end=" .. seqno_text(f.end_seqno)
      .. " snap=[" .. int_text(f.snap_start_seqno) .. "," .. int_text(f.snap_end_seqno)
      .. "] uuid=" .. int_text(f.vbucket_uuid)
end

local function summary(m)
  local key = (m.magic * 256 + m.opcode) * 65536 + (m.vbucket or m.status)
  local s = prefixes[key]
  if s == nil then
    if SERVER_MAGIC[m.magic] then
      s = SERVER_OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    else
      s = OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    end
    if m.request then
      if not m.spec or m.spec.vbucket then s = s .. " vb:" .. m.vbucket end
    elseif m.status ~= 0 then s = s .. " " .. (STATUS_NAMES[m.status] or fmt("status:0x%x", m.status))
    else s = s .. " rsp" end
    if n_prefixes >= 4096 then prefixes, n_prefixes = {}, 0 end
    prefixes[key], n_prefixes = s, n_prefixes + 1
  end
  if m.stream_id then s = s .. " sid:" .. int_text(m.stream_id) end
  local f = m.f
  if m.opcode == 0x53 and m.request and f.start_seqno and f.snap_start_seqno then
    s = s .. " " .. stream_request_text(f)
  elseif m.opcode == 0x50 and m.request and f.flags and m.name_text then
    local role = "consumer"
    if band(f.flags, OPEN_PRODUCER) ~= 0 then role = "producer" end
    s = s .. " " .. m.name_text .. " (" .. role .. ")"
  elseif m.opcode == 0x56 and f.start_seqno and f.end_seqno then
    s = s .. " [" .. int_text(f.start_seqno) .. ".." .. int_text(f.end_seqno) .. "] " .. (m.layout or "")
  elseif m.spec and m.spec.seqno and f[m.spec.seqno] then
    s = s .. " seqno=" .. int_text(f[m.spec.seqno])
  elseif f.failover_log then
    s = s .. " failover_log(" .. #f.failover_log .. ")"
  elseif f.rollback_seqno then
    s = s .. " rollback_seqno=" .. int_text(f.rollback_seqno)
  end
  return s
end

local info_frame, info_text = nil, nil   -- the frame and Info text this dissector last wrote

-- One Info update per dissector call; a second call for the same frame (bytes after a
-- reassembled message) appends.
local function set_info(pinfo, text)
  local col = pinfo.cols.info
  local cur = tostring(col)
  if cur == "(info)" then return end    -- no columns in this run (tshark -T fields)
  if info_frame == pinfo.number and cur == info_text then
    col:append("; " .. text)
  else
    col:set(text)
  end
  info_frame, info_text = pinfo.number, tostring(col)
end

-- Bytes that cannot start a message, `cap` captured of `plen` (the rest of the segment).
local function dissect_garbage(tvb, tree, off, cap, plen, problem, rule)
  local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
  ti_set_text(node, "Couchbase DCP: not MCBP (" .. problem .. ")")
  ti_add(node, F.garbage, tvb_range(tvb, off, cap))
  ti_expert(node, EXPERTS[rule], "[" .. rule .. "] " .. problem ..
      fmt("; %d bytes skipped", plen))
  return "[not MCBP: " .. problem .. "]"
end

local expert_node = nil   -- the message node that check_message's findings go to

local function add_expert(rule, msg)
  ti_expert(expert_node, EXPERTS[rule], "[" .. rule .. "] " .. msg)
end

-- The message being dissected: one table, refilled for every message.
local msg = {magic = 0, opcode = 0, bodylen = 0, extlen = 0, datatype = 0, request = false,
             f = false, framing_len = 0, keylen = 0, k_end = 0, value_len = 0, vbucket = 0,
             status = 0, spec = false, layout = false, stream_id = false, frame_error = false}
local NO_INFOS = {}

-- One message at `off`, of which `cap` bytes are captured (`plen` in all), `head` its first
-- 12 bytes; returns its Info text. Extras fields go straight into the message's subtree.
local connection   -- defined below: the negotiation of the frame's connection
local link         -- defined below: a request's response, a response's request
local account      -- defined below: the DCP streams statistics

-- The key. The key of a document opcode's request on a connection whose HELLO enabled
-- Collections is shown as its collection id (leb128) and the logical key, so that
-- `dcp.key contains "foo"` sees the key.
local function add_key(tvb, node, spec, at, len, pinfo, from_client)
  if spec and spec.document and collections(connection(pinfo, from_client).ctx) then
    local cid, prefix = split_collection_key(tvb_raw(tvb, at, len < 5 and len or 5))
    if cid then
      local r = tvb_range(tvb, at, prefix)
      local item = ti_add(node, F.collection_id, r, cid)
      local name = collection_name(cid)
      if name then
        ti_append_text(item, " (" .. name .. ")")
        ti_set_generated(ti_add(node, F.collection_name, r, name))
      end
      at, len = at + prefix, len - prefix
    end
  end
  if len > 0 then ti_add(node, f_key, tvb_range(tvb, at, len)) end
end

local function dissect_message(tvb, tree, off, cap, plen, head, pinfo, from_client)
  if cap < HEADER_SIZE then
    local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
    ti_set_text(node, "Couchbase DCP: header cut by the capture")
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d header bytes",
        cap, HEADER_SIZE))
    return "[cut by the capture]"
  end
  @HEADER_UNPACK@
  if not MAGIC_NAMES[magic] then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("illegal magic 0x%02x", magic), "unknown-magic")
  end
  if HEADER_SIZE + bodylen > MAX_FRAME_SIZE then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("body length %d exceeds the %d MiB frame limit",
        bodylen, math.floor(MAX_FRAME_SIZE / 1048576)), "frame-too-large")
  end
  local request, server = REQUEST_MAGIC[magic] == true, SERVER_MAGIC[magic]
  local k_end = framing_len + extlen + keylen
  local m = msg
  m.magic, m.opcode, m.bodylen, m.extlen, m.datatype = magic, opcode, bodylen, extlen, datatype
  m.request, m.f, m.framing_len, m.keylen, m.k_end = request, {}, framing_len, keylen, k_end
  m.value_len, m.spec, m.layout, m.stream_id, m.frame_error = bodylen - k_end, nil, nil, nil, nil
  m.opaque, m.infos, m.overrun, m.truncated = opaque, NO_INFOS, k_end > bodylen, false
  m.extras_problem, m.value_problem, m.value_bytes = nil, nil, nil
  m.tvb, m.key_at = tvb, off + HEADER_SIZE + framing_len + extlen
  m.val_at = m.key_at + keylen
  if request then m.vbucket, m.status = specific, nil else m.vbucket, m.status = nil, specific end
  if not server then m.spec = SHAPES[opcode] end
  local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
  ti_add(node, f_magic, tvb_range(tvb, off, 1))
  ti_add(node, server and f_server_opcode or f_opcode, tvb_range(tvb, off + 1, 1))
  if FLEX_MAGIC[magic] then
    ti_add(node, f_framing_len, tvb_range(tvb, off + 2, 1))
    ti_add(node, f_keylen, tvb_range(tvb, off + 3, 1))
  else
    ti_add(node, f_keylen, tvb_range(tvb, off + 2, 2))
  end
  ti_add(node, f_extlen, tvb_range(tvb, off + 4, 1))
  local dtr = tvb_range(tvb, off + 5, 1)
  local dt = ti_add(node, f_datatype, dtr)
  for i = 1, #DATATYPE_BITS do ti_add(dt, DATATYPE_BITS[i][1], dtr) end
  ti_add(node, request and f_vbucket or f_status, tvb_range(tvb, off + 6, 2))
  local r_bodylen = tvb_range(tvb, off + 8, 4)
  ti_add(node, f_bodylen, r_bodylen)
  ti_add(node, f_opaque, tvb_range(tvb, off + 12, 4))
  local r_cas = tvb_range(tvb, off + 16, 8)
  ti_add(node, f_cas, r_cas)
  m.cas_zero, m.cas_range = cas_zero, r_cas

  local complete = cap >= HEADER_SIZE + bodylen
  m.truncated = not complete
  if not complete then
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d bytes",
        cap, HEADER_SIZE + bodylen))
  end
  local body = off + HEADER_SIZE
  local e_end = framing_len + extlen
  local have = cap - HEADER_SIZE      -- body bytes captured: a cut message shows what they hold
  -- framing extras (the part of them inside the body)
  if framing_len > 0 and have >= math.min(framing_len, bodylen) then
    dissect_frame_infos(tvb, node, m, body, body + math.min(framing_len, bodylen))
  end
  if k_end <= bodylen and have >= e_end then
    local spec, shape = m.spec, nil
    if spec then
      if request then shape = spec.req else shape = spec.rsp end
    end
    -- extras
    if extlen > 0 then
      local ext_at = body + framing_len
      local lay = shape and shape.extras_by_size[extlen]
      if lay then
        add_fields(tvb, node, ext_at, lay, m.f, spec and spec.seqno)
        m.layout = lay.label
      else
        ti_add(node, f_extras, tvb_range(tvb, ext_at, extlen))
        if shape then m.extras_problem = fmt("extras length %d not in %s", extlen, shape.extras_sizes) end
      end
    end
    if keylen > 0 and have > e_end then
      add_key(tvb, node, request and spec, body + e_end, math.min(keylen, have - e_end), pinfo,
              from_client)
    end
    local n = m.value_len
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, n))
    local val_at = body + k_end
    if not complete then
      n = 0                           -- the value was not captured whole: not decoded
    elseif n > 0 and (opcode == 0x1f or (shape and shape.keep_value)) then
      m.value_bytes = tvb_raw(tvb, val_at, n)
    end
    local decoded, wanted = false, nil
    if shape and #shape.values > 0 and complete then
      for i = 1, #shape.values do
        local lay = shape.values[i]
        if layout_matches(lay, m) then
          wanted = (wanted and wanted .. "/" or "") .. lay.size .. (lay.rep and "*n" or "")
          if lay.rep then
            if n % lay.size == 0 and (n > 0 or #lay.when > 0) then
              local vt = node:add(f_value, tvb(val_at, n))
              local entries, count = {}, math.floor(n / lay.size)
              vt:set_text(fmt("Value: %s, %d entries", lay.rep, count))
              vt:add(F.failover_log_count, tvb(val_at, n), count):set_generated()
              for k = 0, count - 1 do
                local et = vt:add(tvb(val_at + k * lay.size, lay.size), fmt("Entry %d", k))
                local entry = {}
                add_fields(tvb, et, val_at + k * lay.size, lay, entry)
                entries[#entries + 1] = entry
              end
              m.f[lay.rep] = entries
              m.layout = lay.label
              decoded = true
              break
            end
          elseif n == lay.size then
            local vt = ti_add(node, f_value, tvb_range(tvb, val_at, n))
            ti_set_text(vt, lay.text)
            add_fields(tvb, vt, val_at, lay, m.f, spec and spec.seqno)
            m.layout = lay.label
            decoded = true
            break
          end
        end
      end
    end
    if not decoded and n > 0 then
      local item = ti_add(node, f_value, tvb_range(tvb, val_at, n))
      -- Text values as text, as the built-in dissector shows them: DcpControl's, DcpOpen's
      -- and stream requests', and in the GUI documents whose datatype says JSON (in tshark a
      -- text label on every document would cost 15% of the CPU).
      if (shape and shape.text_value) or (DOCUMENT_TEXT and spec and spec.document
                                          and datatype % 4 == 1) then
        ti_set_text(item, "Value: " .. printable(tvb_raw(tvb, val_at, math.min(n, 256)))
                    .. (n > 256 and "..." or ""))
      end
    end
    if not decoded and wanted and complete then
      m.value_problem = fmt("value length %d does not match %s", n, wanted)
    end
    if m.layout and spec and spec.layout_field then
      ti_set_generated(ti_add(node, spec.layout_field, m.layout))
    end
  elseif complete or k_end <= bodylen then
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, m.value_len))
  end

  m.name_text = nil
  if opcode == 0x50 and request then      -- DcpOpen: its name (the key) in the Info column
    local n = math.min(keylen, off + cap - m.key_at)
    if n >= 0 then
      m.name_text = '"' .. printable(tvb_raw(tvb, m.key_at, n)) .. '"'
    end
  end
  local text = summary(m)
  ti_set_text(node, "Couchbase DCP, " .. text)
  link(node, m, pinfo, from_client, off)
  account(m, pinfo, from_client)
  expert_node = node
  -- the negotiation matters for what the client sends and for HELLO / DcpOpen answers
  local conn = nil
  if from_client or opcode == 0x1f or opcode == 0x50 then conn = connection(pinfo, from_client) end
  check_message(m, conn and conn.ctx, from_client, add_expert)
  if conn then
    if complete or (opcode == 0x50 and m.f.flags ~= nil) then   -- a cut DcpOpen: its flags
      negotiate(conn, m, from_client)
    else
      negotiate_cut(conn, m, from_client)
    end
  end
  if opcode == 0x5f and request and complete and keylen > 0 and m.value_len > 0
      and not pinfo.visited then
    learn_names(m.f.event, m.f.version, tvb_raw(tvb, m.key_at, keylen),
                tvb_raw(tvb, m.val_at, m.value_len))
  end
  if builtin and complete and not m.spec then
    builtin:call(tvb_range(tvb, off, cap):tvb(), pinfo, tree)
    local shown = tostring(pinfo.cols.info)
    if shown ~= "(info)" and shown ~= "" then text = shown end
    return text, false
  end
  return text, true
end

local texts = {}   -- Info texts of the messages of one dissector call

local call_conn = nil   -- the connection of the current dissector call, once looked up
local tcp_stream = Field.new("tcp.stream")
local stream_keys = {}  -- 2 * tcp.stream (+ 1 from the client) -> "client-server"

local function last(...)
  local n = select("#", ...)
  if n > 0 then return (select(n, ...)) end
end

-- "client-server" of the frame's TCP connection; each TCP stream's is built once.
local function connection_key(pinfo, from_client)
  local stream = last(tcp_stream())
  local skey = stream and stream.value * 2 + (from_client and 1 or 0)
  local key = skey and stream_keys[skey]
  if key == nil then
    local a, b = tostring(pinfo.src) .. ":" .. pinfo.src_port, tostring(pinfo.dst) .. ":" .. pinfo.dst_port
    if not from_client then a, b = b, a end
    key = a .. "-" .. b
    if skey then stream_keys[skey] = key end
  end
  return key
end

-- Requests and responses linked as Wireshark's request/response protocols show them: a
-- response names its request's frame and the time since it, a request its response's frame
-- once that is known (Wireshark's second pass: the GUI, tshark -2). A request is known by its
-- TCP stream, the side that sent it, its opaque and opcode; stream items are left out (they
-- are answered only on errors). A message is known by its frame and offset.
local requests, n_requests = {}, 0   -- request key -> {message, abs_ts}
local answered, answers = {}, {}     -- request -> response; response -> {request, seconds}

link = function(node, m, pinfo, from_client, off)
  if m.spec and m.spec.item then return end
  local stream = last(tcp_stream())
  if stream == nil then return end
  local here = pinfo.number .. ":" .. off
  local sender = from_client
  if not m.request then sender = not from_client end
  local key = fmt("%d:%s:%d:%d", stream.value, tostring(sender), m.opaque, m.opcode)
  if m.request then
    if not pinfo.visited then
      if n_requests >= 65536 then requests, n_requests = {}, 0 end
      requests[key], n_requests = {here, pinfo.abs_ts}, n_requests + 1
    end
    local rsp = answered[here]
    if rsp then ti_set_generated(ti_add(node, F.response_in, tonumber(string.match(rsp, "^%d+")))) end
  else
    if not pinfo.visited then
      local req = requests[key]
      if req then
        requests[key], n_requests = nil, n_requests - 1
        answered[req[1]], answers[here] = here, {req[1], pinfo.abs_ts - req[2]}
      end
    end
    local a = answers[here]
    if a then
      ti_set_generated(ti_add(node, F.response_to, tonumber(string.match(a[1], "^%d+"))))
      local secs = math.floor(a[2])
      ti_set_generated(ti_add(node, F.time, NSTime.new(secs, math.floor((a[2] - secs) * 1e9 + 0.5))))
    end
  end
end

-- DCP streams (Statistics > DCP Streams; tshark -z dcp,streams) -------------------------------
-- Per stream (TCP connection, vbucket, stream id) what the first pass saw: its request and
-- answer, markers, items, first and last seqno, last snapshot and end; `dcpdissect streams`
-- gives the same per stream, with the analyzer's findings.
local streams, stream_list, opened = {}, {}, {}   -- opened: connection opaque -> stream
local call_key = nil     -- the connection of the current dissector call, once looked up

-- The stream of (connection, vbucket, stream id); a new one from each stream request.
local function stream_at(conn, vb, sid, new)
  local of_conn = streams[conn]
  if of_conn == nil then of_conn = {} streams[conn] = of_conn end
  local key = vb * 65536 + (sid or 65535)
  local s = of_conn[key]
  if s == nil or new then
    s = {conn = conn, vb = vb, sid = sid, requested = "-", answer = "-", markers = 0,
         items = 0, first = nil, last = nil, snapshot = "-", ended = "-"}
    of_conn[key] = s
    stream_list[#stream_list + 1] = s
  end
  return s
end

-- A stream request names its stream id in its JSON value ({"sid": 7}).
local function requested_sid(m)
  if m.stream_id or not m.value_bytes then return m.stream_id end
  local doc = json_value(m.value_bytes, 1)
  if type(doc) ~= "table" or doc.is_array then return nil end
  for n = 1, #doc do         -- an object: {key, value} pairs in order
    if doc[n][1] == "sid" and type(doc[n][2]) == "number" then return doc[n][2] end
  end
  return nil
end

account = function(m, pinfo, from_client)
  local spec = m.spec
  if pinfo.visited or not spec or not spec.vbucket then return end
  call_key = call_key or connection_key(pinfo, from_client)
  local f, conn = m.f, call_key
  if m.request and m.opcode == 0x53 then
    local s = stream_at(conn, m.vbucket, requested_sid(m), true)
    if f.start_seqno and f.snap_start_seqno then s.requested = stream_request_text(f) end
    opened[conn .. "|" .. m.opaque] = s
  elseif not m.request and m.opcode == 0x53 then
    local s = opened[conn .. "|" .. m.opaque]
    if s == nil then return end
    if m.status == 0 then
      s.answer = "success"
      if f.failover_log then s.answer = s.answer .. ", failover log of " .. #f.failover_log end
    elseif f.rollback_seqno then
      s.answer = "rollback to " .. int_text(f.rollback_seqno)
    else
      s.answer = STATUS_NAMES[m.status] or fmt("status 0x%x", m.status)
    end
  elseif m.request and spec.stream then
    local s = stream_at(conn, m.vbucket, m.stream_id)
    if m.opcode == 0x56 and f.start_seqno then
      s.markers = s.markers + 1
      s.snapshot = "[" .. int_text(f.start_seqno) .. "," .. int_text(f.end_seqno) .. "]"
    elseif m.opcode == 0x55 then
      s.ended = VS_STREAM_END_REASON[f.reason] or (f.reason and int_text(f.reason)) or "yes"
    elseif spec.item then
      s.items = s.items + 1
    end
    local seqno = spec.seqno and f[spec.seqno]
    if seqno then
      s.first = s.first or seqno
      s.last = seqno
    end
  end
end

-- The streams as a text table, in the order they were first seen.
local function streams_text()
  local rows = {{"connection", "vb", "sid", "requested", "answer", "markers", "items", "seqnos",
                 "last snapshot", "end"}}
  for _, s in ipairs(stream_list) do
    local seqnos = "-"
    if s.first then seqnos = int_text(s.first) .. ".." .. int_text(s.last) end
    rows[#rows + 1] = {(string.gsub(s.conn, "%-", " -> ")), int_text(s.vb),
                       s.sid and int_text(s.sid) or "-", s.requested, s.answer,
                       int_text(s.markers), int_text(s.items), seqnos, s.snapshot, s.ended}
  end
  local widths = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do widths[i] = math.max(widths[i] or 0, #cell) end
  end
  local out = {}
  for _, row in ipairs(rows) do
    local cells = {}
    for i, cell in ipairs(row) do cells[i] = cell .. string.rep(" ", widths[i] - #cell) end
    out[#out + 1] = (string.gsub(table.concat(cells, "  "), "%s+$", ""))
  end
  return "DCP streams: " .. #stream_list .. "\n" .. table.concat(out, "\n") .. "\n"
end

local function streams_window()
  TextWindow.new("DCP streams"):set(streams_text())
end

if register_stat_cmd_arg then       -- -z dcp,streams: printed by tshark, a window in the GUI
  register_stat_cmd_arg("dcp,streams", function()
    local tap, shown = Listener.new("frame", "dcp"), false
    function tap.draw()
      if not gui_enabled() then
        io.write(streams_text())
      elseif not shown then
        shown = true
        streams_window()
      end
    end
  end)
end
if gui_enabled and gui_enabled() then
  register_menu("DCP Streams", streams_window, MENU_STAT_GENERIC)
end

-- The connection's negotiation as it was when this frame was first dissected (recorded on
-- the first pass, replayed when Wireshark dissects the frame again).
connection = function(pinfo, from_client)
  if call_conn then return call_conn end
  local key = connection_key(pinfo, from_client)
  local conn = contexts[key]
  if conn == nil then
    local start = tcp_completeness()
    local dcp_state = nil
    if start and band(start.value, 1) ~= 0 then dcp_state = false end
    local ctx = {dcp = dcp_state}
    conn = {ctx = ctx, first = ctx, history = {}, pending = {}}
    contexts[key] = conn
  end
  local frame = pinfo.number
  if pinfo.visited then
    conn = {ctx = ctx_before(conn, frame), pending = {}}
  end
  changed_in = frame
  call_conn = conn
  return conn
end

-- Messages are cut from the TCP stream here rather than with dissect_tcp_pdus (one Lua
-- call per segment instead of two per message): a message that runs past the segment
-- asks TCP for more bytes (pinfo.desegment_offset/len) and comes back reassembled.
-- An implausible header swallows the rest of the segment.
function dcp.dissector(tvb, pinfo, tree)
  local captured, reported = tvb_len(tvb), tvb_reported_len(tvb)
  local can_desegment = pinfo.can_desegment > 0
  local n_texts, off, dcp_seen = 0, 0, false
  local from_client = owned[pinfo.dst_port] ~= nil and owned[pinfo.src_port] == nil
  call_conn, call_key = nil, nil
  while off < reported do
    local avail = captured - off
    if avail < 0 then break end
    local plen, head = reported - off, nil
    if avail < HEADER_SIZE then
      if can_desegment then
        pinfo.desegment_offset, pinfo.desegment_len = off, DESEGMENT_ONE_MORE_SEGMENT
        break
      end
    else
      head = tvb_raw(tvb, off, 24)
      local magic, _, _, _, _, _, _, _, l1, l2, l3, l4 = sbyte(head, 1, 12)
      local size = HEADER_SIZE + ((l1 * 256 + l2) * 256 + l3) * 256 + l4
      if MAGIC_NAMES[magic] and size <= MAX_FRAME_SIZE then plen = size end
    end
    if plen > avail and can_desegment then
      pinfo.desegment_offset, pinfo.desegment_len = off, plen - avail
      break
    end
    local ok, text, own = pcall(dissect_message, tvb, tree, off, avail < plen and avail or plen, plen,
                                head, pinfo, from_client)
    if not ok then
      ti_expert(tree, e_internal, "dcpdissect: " .. tostring(text))
      text = "[dissector error]"
    end
    dcp_seen = dcp_seen or own ~= false
    n_texts = n_texts + 1
    texts[n_texts] = text
    off = off + plen
  end
  -- The protocol column says DCP when a message of this call was not the built-in's.
  if dcp_seen or n_texts == 0 then pinfo.cols.protocol = "DCP" end
  if n_texts > 0 then set_info(pinfo, table.concat(texts, "; ", 1, n_texts)) end
  return captured
end

function dcp.init()
  info_frame, info_text = nil, nil
  requests, n_requests, answered, answers = {}, 0, {}, {}
  streams, stream_list, opened = {}, {}, {}
  contexts, stream_keys = {}, {}
  scope_names, collection_names = {}, {}
end

-- Ports ------------------------------------------------------------------------------------
dcp.prefs.tcp_ports = Pref.range("TCP ports", "@PORTS@",
    "TCP ports decoded as DCP/MCBP (the built-in couchbase dissector is replaced there)", 65535)

local tcp_table = DissectorTable.get("tcp.port")

local function port_list(ranges)
  local ports = {}
  for part in string.gmatch(ranges, "[^,%s]+") do
    local a, b = string.match(part, "^(%d+)-(%d+)$")
    if a == nil then a = string.match(part, "^(%d+)$") b = a end
    if a ~= nil then
      for p = tonumber(a), math.min(tonumber(b), tonumber(a) + 1024) do ports[p] = true end
    end
  end
  return ports
end

local function take_ports(ranges)
  local wanted = port_list(ranges)
  for p, prev in pairs(owned) do
    if not wanted[p] then
      tcp_table:remove(p, dcp)
      if prev then tcp_table:add(p, prev) end
      owned[p] = nil
    end
  end
  for p in pairs(wanted) do
    if owned[p] == nil then
      owned[p] = tcp_table:get_dissector(p) or false
      tcp_table:add(p, dcp)
    end
  end
end

take_ports("@PORTS@")

-- TLS: with `-o tls.keylog_file:FILE` Wireshark decrypts the connections and hands the
-- application data of the TLS ports (preference dcp.tls_ports) to this dissector.
dcp.prefs.tls_ports = Pref.range("TLS ports", "@TLS_PORTS@",
    "TLS ports whose decrypted application data is DCP/MCBP (set tls.keylog_file)", 65535)

local tls_table, tls_owned = DissectorTable.get("tls.port"), {}

local function take_tls_ports(ranges)
  local wanted = port_list(ranges)
  for p in pairs(tls_owned) do
    if not wanted[p] then tls_table:remove(p, dcp) tls_owned[p] = nil end
  end
  for p in pairs(wanted) do
    if not tls_owned[p] then tls_table:add(p, dcp) tls_owned[p] = true end
  end
end

take_tls_ports("@TLS_PORTS@")

function dcp.prefs_changed()
  take_ports(tostring(dcp.prefs.tcp_ports))
  take_tls_ports(tostring(dcp.prefs.tls_ports))
end

-- Findings in packet comments ----------------------------------------------------------------
-- `dcpdissect analyze --annotate` and the evidence bundles write one packet comment
-- "[rule] message" per finding on each of its frames; a postdissector shows them under their
-- own tree, each as an expert info of the rule's own severity (errors are errors).
local findings = Proto("dcpfindings", "dcpdissect findings")
local f_finding = ProtoField.string("dcpfindings.finding", "Finding")
local f_finding_rule = ProtoField.string("dcpfindings.rule", "Rule")
local f_finding_severity = ProtoField.string("dcpfindings.severity", "Severity")
local e_findings = {
  error = ProtoExpert.new("dcpfindings.error", "dcpdissect finding (error)",
                          expert.group.PROTOCOL, expert.severity.ERROR),
  warning = ProtoExpert.new("dcpfindings.warning", "dcpdissect finding (warning)",
                            expert.group.PROTOCOL, expert.severity.WARN),
  info = ProtoExpert.new("dcpfindings.info", "dcpdissect finding (info)",
                         expert.group.PROTOCOL, expert.severity.NOTE),
}
findings.fields = {f_finding, f_finding_rule, f_finding_severity}
findings.experts = {e_findings.error, e_findings.warning, e_findings.info}
local comment_field
for _, name in ipairs({"frame.comment", "pkt_comment"}) do
  local ok, field = pcall(Field.new, name)
  if ok then comment_field = field break end
end

function findings.dissector(tvb, pinfo, tree)
  if comment_field == nil or comment_field() == nil then return end   -- most frames
  local node
  for _, c in ipairs({comment_field()}) do
    local text = tostring(c.value)
    local rule = string.match(text, "^%[([%w][%w%-]*)%] ")
    local severity = rule and RULE_SEVERITY[rule]
    if severity then
      node = node or tree:add(findings, tvb(0, 0))
      local item = node:add(f_finding, text)
      item:add(f_finding_rule, rule):set_generated()
      item:add(f_finding_severity, severity):set_generated()
      item:add_proto_expert_info(e_findings[severity], text)
    end
  end
end

register_postdissector(findings)
