-- dcpdissect: the single-message rules of the analyzer, interpreted from the rendered tables.
-- Part of lua/dcpdissect.lua (dcpdissect/luagen inserts it after the tables).

-- Each shape's extras layouts by size (decoding and the extras-length rule look them up).
for _, spec in pairs(SHAPES) do
  for _, shape in ipairs({spec.req, spec.rsp}) do
    shape.extras_by_size = {}
    for i = 1, #shape.extras do shape.extras_by_size[shape.extras[i].size] = shape.extras[i] end
  end
end

-- Single-message rules ----------------------------------------------------------------------
-- The same table data as dcpdissect.analysis.rules.structure, interpreted the same way:
-- generic header rules (kv_engine McbpValidator::verify_header) from each opcode's shape,
-- then the shape's checks. Rules that depend on the connection's negotiation (HELLO,
-- DcpOpen) apply to messages the client sent, and only when the capture showed it.

local function num(v)
  if type(v) == "number" then return v end
  return v:tonumber()
end

local HEADER_NAMES = {extlen = true, keylen = true, value_len = true, datatype = true, status = true}

local function val(m, name)
  local v = m.f[name]
  if v ~= nil then return v end
  if HEADER_NAMES[name] then return m[name] end
  return nil
end

local function render_text(text, m)
  return (string.gsub(text, "{([%w_]+)(:?x?)}", function(name, hex)
    local v = val(m, name)
    if v == nil then return "?" end
    if hex == ":x" then return fmt("0x%x", num(v)) end
    return int_text(v)
  end))
end

local function le(a, b)
  if type(a) == type(b) then return a <= b end
  return num(a) <= num(b)
end

local function one_of(v, list)
  local n = num(v)
  for i = 1, #list do if list[i] == n then return true end end
  return false
end

local function holds(cond, m)
  local v = val(m, cond[2])
  if v == nil then return nil end
  local kind, arg = cond[1], cond[3]
  if kind == "set" then return band(num(v), arg) ~= 0 end
  if kind == "clear" then return band(num(v), arg) == 0 end
  if kind == "eq" then return num(v) == arg end
  return num(v) ~= arg
end

local function check_passes(c, m)
  for i = 1, #c.when do
    if not holds(c.when[i], m) then return true end
  end
  local t = c.test
  local kind, v = t[1], val(m, t[2])
  if v == nil then return true end
  if kind == "le" then
    local other = val(m, t[3])
    return other == nil or le(v, other)
  elseif kind == "range" then
    local x, hi = val(m, t[3]), val(m, t[4])
    return x == nil or hi == nil or (le(v, x) and le(x, hi))
  elseif kind == "ne" then return num(v) ~= t[3]
  elseif kind == "in" then return one_of(v, t[3])
  elseif kind == "mask" then return band(num(v), bnot(t[3])) == 0
  elseif kind == "only_with" then
    v = num(v)
    return band(v, t[3]) == 0 or band(v, bnot(bor(t[3], t[4]))) == 0
  elseif kind == "not_both" then
    v = num(v)
    return not (band(v, t[3]) ~= 0 and band(v, t[4]) ~= 0)
  elseif kind == "needs" then
    v = num(v)
    return band(v, t[3]) == 0 or band(v, t[4]) ~= 0
  elseif kind == "one_bit" then
    local bits = band(num(v), t[3])
    return bits ~= 0 and band(bits, bits - 1) == 0
  end
  error("unknown check " .. tostring(kind))
end

-- Negotiation (HELLO, DcpOpen) per connection. A context is never changed in place: a new
-- one replaces it and joins the connection's history ({frame that changed it, context}),
-- so that a later re-dissection (Wireshark's GUI) judges each frame by the context in force
-- when it was first dissected.
local contexts = {}   -- "client-server" -> {ctx = ..., first = ..., history = {...}, pending = {}}
local changed_in = 0  -- the frame being dissected (set by connection())

local function set_ctx(conn, ctx)
  conn.ctx = ctx
  local history = conn.history
  if history then history[#history + 1] = {changed_in, ctx} end
end

-- The context in force at the start of `frame`'s first dissection.
local function ctx_before(conn, frame)
  local ctx, history = conn.first, conn.history
  for i = 1, #history do
    if history[i][1] >= frame then break end
    ctx = history[i][2]
  end
  return ctx
end

local function ctx_with(ctx, key, value)
  local new = {}
  for k, v in pairs(ctx) do new[k] = v end
  new[key] = value
  return new
end

local function collections(ctx)
  if ctx.features == nil then return nil end
  return ctx.features[FEATURE_COLLECTIONS] == true
end

local function enabled_datatypes(ctx)
  if ctx.features == nil then return nil end
  local bits = 0
  for feature, bit in pairs(DATATYPE_FEATURES) do
    if ctx.features[feature] then bits = bits + bit end
  end
  return bits
end

local function is_consumer(ctx)
  if ctx.open_flags == nil then return nil end
  return band(ctx.open_flags, OPEN_PRODUCER) == 0
end

local function delete_v2(ctx)
  if collections(ctx) or band(ctx.open_flags or 0, OPEN_DELETE_TIMES) ~= 0 then return true end
  if collections(ctx) == nil or ctx.open_flags == nil then return nil end
  return false
end

local function negotiate(conn, m, from_client)
  if SERVER_MAGIC[m.magic] then return end
  local key = m.opcode * 4294967296 + m.opaque
  if m.request and from_client then
    if m.opcode == 0x1f then
      conn.pending[key] = {}
    elseif m.opcode == 0x50 then
      conn.pending[key] = {flags = m.f.flags, dcp = conn.ctx.dcp}
      set_ctx(conn, ctx_with(conn.ctx, "dcp", true))
    end
  elseif not m.request and not from_client then
    local info = conn.pending[key]
    if info == nil then return end
    conn.pending[key] = nil
    if m.opcode == 0x1f and m.status == 0 then
      local features, v = {}, m.value_bytes or ""
      for i = 1, #v - 1, 2 do features[sbyte(v, i) * 256 + sbyte(v, i + 1)] = true end
      set_ctx(conn, ctx_with(conn.ctx, "features", features))
    elseif m.opcode == 0x50 then
      if m.status == 0 then
        set_ctx(conn, ctx_with(conn.ctx, "open_flags", info.flags))
      else
        set_ctx(conn, ctx_with(conn.ctx, "dcp", info.dcp))
      end
    end
  end
end

-- A negotiating request the capture cut (its value or key not whole): what it asked is not
-- known, nor whether the connection is a DCP one (Negotiation.undecoded).
local NEGOTIATING = {[0x1f] = true, [0x50] = true, [0x5e] = true, [0x89] = true}
local function negotiate_cut(conn, m, from_client)
  if m.request and from_client and NEGOTIATING[m.opcode] and conn.ctx.dcp == false then
    set_ctx(conn, ctx_with(conn.ctx, "dcp", nil))
  end
end

local function layout_allowed(lay, ctx)
  if lay.context == nil or ctx == nil or delete_v2(ctx) == nil then return true end
  return delete_v2(ctx) == (lay.context == "delete_v2")
end

-- The leb128 collection id before a document key (include/mcbp/protocol/unsigned_leb128.h):
-- collection id and prefix length, or nil, nil and why the server refuses the prefix.
local function split_collection_key(key)
  local cid = 0
  for i = 1, math.min(#key, 5) do
    local b = sbyte(key, i)
    cid = cid + band(b, 0x7f) * 2 ^ (7 * (i - 1))
    if b < 0x80 then
      if i > 1 and b == 0 then return nil, nil, "non-canonical leb128" end
      return cid, i, nil
    end
  end
  return nil, nil, "no stop byte"
end

-- Collection and scope names, capture-wide, from the system events that create or modify
-- them (ids: include/memcached/protocol_binary.h mcbp::systemevent::id; the key is the name;
-- values of versions 0 and 1: engines/ep/src/collections/system_event_types.h, manifest
-- uid u64, scope id u32, collection id u32; version 2: a FlatBuffers table of
-- engines/ep/src/collections/events.fbs, field 1 scopeId, field 2 collectionId).
local scope_names, collection_names = {}, {}   -- id -> name; id -> {scope id, name}

local function u32_be(s, at)
  local a, b, c, d = sbyte(s, at, at + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function u_le(s, at, width)
  local v = 0
  for i = at + width - 1, at, -1 do v = v * 256 + sbyte(s, i) end
  return v
end

-- Field `field` (a uint32) of a FlatBuffers root table: 0 when absent, nil when malformed.
local function flatbuffer_uint32(s, field)
  local n = #s
  if n < 8 then return nil end
  local tbl = u_le(s, 1, 4)
  if tbl + 4 > n then return nil end
  local soff = u_le(s, tbl + 1, 4)
  if soff >= 2147483648 then soff = soff - 4294967296 end
  local vt = tbl - soff
  if vt < 0 or vt + 4 > n then return nil end
  local slot = 4 + 2 * field
  if slot + 2 > u_le(s, vt + 1, 2) or vt + slot + 2 > n then return 0 end
  local at = u_le(s, vt + slot + 1, 2)
  if at == 0 then return 0 end
  if tbl + at + 4 > n then return nil end
  return u_le(s, tbl + at + 1, 4)
end

local function learn_names(event, version, key, value)
  if #key == 0 or not (event == 0 or event == 3 or event == 5) then return end
  local scope, cid
  if version == 0 or version == 1 then
    if #value < (event == 3 and 12 or 16) then return end
    scope = u32_be(value, 9)
    if event ~= 3 then cid = u32_be(value, 13) end
  elseif version == 2 then
    scope = flatbuffer_uint32(value, 1)
    if event ~= 3 then cid = flatbuffer_uint32(value, 2) end
    if scope == nil or (event ~= 3 and cid == nil) then return end
  else
    return
  end
  if event == 3 then scope_names[scope] = key else collection_names[cid] = {scope, key} end
end

local function collection_name(cid)
  local entry = collection_names[cid]
  if entry == nil then return nil end
  local scope = scope_names[entry[1]]
  return scope and scope .. "." .. entry[2] or entry[2]
end

-- leb128 collection prefix (McbpValidator::is_document_key_valid)
local function document_key_problem(key)
  if #key <= 1 then return "key length must be >= 2 on a collection-aware connection" end
  local cid, prefix, problem = split_collection_key(key)
  if problem then return "collection prefix: " .. problem end
  local logical = #key - prefix
  if logical == 0 then return "no logical key after the collection prefix" end
  if cid >= 1 and cid <= 7 then return fmt("reserved collection id %d", cid) end
  local limit = cid == 0 and MAX_KEY_LENGTH or MAX_COLLECTIONS_LOGICAL_KEY_LENGTH
  if logical > limit then return fmt("logical key of %d bytes exceeds %d", logical, limit) end
  return nil
end

local function utf8_valid(s)
  local i, n = 1, #s
  while i <= n do
    local c = sbyte(s, i)
    local w = c < 0x80 and 1 or (c >= 0xc2 and c < 0xe0 and 2) or (c >= 0xe0 and c < 0xf0 and 3)
              or (c >= 0xf0 and c < 0xf5 and 4) or nil
    if w == nil or i + w - 1 > n then return false end
    for j = i + 1, i + w - 1 do
      if band(sbyte(s, j), 0xc0) ~= 0x80 then return false end
    end
    i = i + w
  end
  return true
end

-- Python's repr() of a bytes object (the analyzer's messages show keys that way)
local function py_bytes(s)
  local quote = "'"
  if string.find(s, "'", 1, true) and not string.find(s, '"', 1, true) then quote = '"' end
  local out = {"b", quote}
  for i = 1, #s do
    local c = sbyte(s, i)
    local ch = string.char(c)
    if ch == "\\" or ch == quote then out[#out + 1] = "\\" .. ch
    elseif c == 9 then out[#out + 1] = "\\t"
    elseif c == 10 then out[#out + 1] = "\\n"
    elseif c == 13 then out[#out + 1] = "\\r"
    elseif c < 32 or c >= 127 then out[#out + 1] = fmt("\\x%02x", c)
    else out[#out + 1] = ch end
  end
  out[#out + 1] = quote
  return table.concat(out)
end

-- A small JSON reader for the DcpOpen value: objects keep their keys in order.
local function json_value(s, i)
  i = string.find(s, "[^ \t\r\n]", i)
  if i == nil then return nil end
  local c = string.sub(s, i, i)
  if c == "{" then
    local obj = {}
    i = string.find(s, "[^ \t\r\n]", i + 1)
    if i and string.sub(s, i, i) == "}" then return obj, i + 1 end
    while i do
      local k
      k, i = json_value(s, i)
      if type(k) ~= "string" then return nil end
      i = string.find(s, "[^ \t\r\n]", i)
      if not i or string.sub(s, i, i) ~= ":" then return nil end
      local v
      v, i = json_value(s, i + 1)
      if i == nil then return nil end
      obj[#obj + 1] = {k, v}
      i = string.find(s, "[^ \t\r\n]", i)
      if not i then return nil end
      local sep = string.sub(s, i, i)
      if sep == "}" then return obj, i + 1 end
      if sep ~= "," then return nil end
      i = i + 1
    end
    return nil
  elseif c == "[" then
    local arr = {is_array = true}
    i = string.find(s, "[^ \t\r\n]", i + 1)
    if i and string.sub(s, i, i) == "]" then return arr, i + 1 end
    while i do
      local v
      v, i = json_value(s, i)
      if i == nil then return nil end
      arr[#arr + 1] = v
      i = string.find(s, "[^ \t\r\n]", i)
      if not i then return nil end
      local sep = string.sub(s, i, i)
      if sep == "]" then return arr, i + 1 end
      if sep ~= "," then return nil end
      i = i + 1
    end
    return nil
  elseif c == '"' then
    local j = i + 1
    while true do
      local k = string.find(s, '["\\]', j)
      if k == nil then return nil end
      if string.sub(s, k, k) == '"' then return string.sub(s, i + 1, k - 1), k + 1 end
      j = k + 2
    end
  end
  local lit = string.match(s, "^-?%d+%.?%d*[eE]?[-+]?%d*", i)
  if lit and #lit > 0 then return tonumber(lit), i + #lit end
  for word, v in pairs({["true"] = true, ["false"] = false, ["null"] = "null"}) do
    if string.sub(s, i, i + #word - 1) == word then return v, i + #word end
  end
  return nil
end

-- xattr blob (xattr/utils.cc validate, key_validator.cc is_valid_xattr_key)
local function be32(s, i)
  local a, b, c, d = sbyte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function xattr_key_valid(key)
  if #key == 0 then return false end
  if not utf8_valid(key) then return false end
  local first = sbyte(key, 1)
  local system = first == 95 or first == 36
  if not system and (string.find(string.sub(key, 1, 1), "^[%p%c]") or first == 127) then return false end
  local dot = string.find(key, "[.%[]") or (#key + 1)
  dot = dot - 1
  return not (dot == 0 or dot >= MAX_XATTR_KEY_LENGTH or (system and dot == 1))
end

local function is_json(text)
  local v, i = json_value(text, 1)
  return i ~= nil and string.find(text, "[^ \t\r\n]", i) == nil
end

local function xattr_problem(value)
  if #value < 4 then return "no room for the xattr blob length" end
  local size = be32(value, 1) + 4
  if size > #value then return fmt("xattr blob length %d exceeds the value", size - 4) end
  local offset, system, keys = 4, 4, {}
  while offset < size do
    if offset + 7 > size then return "truncated xattr pair" end
    local pair = be32(value, offset + 1)
    offset = offset + 4
    if offset + pair > size then return "xattr pair runs past the blob" end
    local end_key = string.find(value, "\0", offset + 1, true)
    if end_key and end_key > size then end_key = nil end
    local end_value = end_key and string.find(value, "\0", end_key + 1, true)
    if end_value and end_value > size then end_value = nil end
    if not end_value then return "xattr pair without its NUL terminators" end
    local key, val = string.sub(value, offset + 1, end_key - 1), string.sub(value, end_key + 1, end_value - 1)
    offset = end_value
    if not xattr_key_valid(key) then return "invalid xattr key " .. py_bytes(string.sub(key, 1, 20)) end
    if not is_json(val) then return "xattr " .. py_bytes(string.sub(key, 1, 20)) .. " value is not JSON" end
    if pair ~= #key + #val + 2 then return "xattr pair length does not match its key and value" end
    if keys[key] then return "duplicate xattr key " .. py_bytes(string.sub(key, 1, 20)) end
    keys[key] = true
    if sbyte(key, 1) == 95 then system = system + 4 + #key + #val + 2 end
  end
  if offset ~= size then return "xattr blob does not end on a pair" end
  if system > MAX_SYSTEM_XATTR_BYTES then
    return fmt("system xattrs use %d bytes, more than %d", system, MAX_SYSTEM_XATTR_BYTES)
  end
  return nil
end

local function snappy_length(data)
  local v = 0
  for i = 1, math.min(#data, 5) do
    local b = sbyte(data, i)
    v = v + band(b, 0x7f) * 2 ^ (7 * (i - 1))
    if b < 0x80 then return v end
  end
  return nil
end

local function open_value_problem(m)
  local doc, i = json_value(m.value_bytes or "", 1)
  if doc ~= nil and i ~= nil and string.find(m.value_bytes, "[^ \t\r\n]", i) then doc = nil end
  if type(doc) ~= "table" or doc.is_array then return "value is not a JSON object" end
  for n = 1, #doc do
    local k, v = doc[n][1], doc[n][2]
    if k ~= "consumer_name" then return "unsupported JSON property " .. k end
    if band(m.f.flags or 0, OPEN_PRODUCER) ~= 0 then return "consumer_name on a producer connection" end
    if type(v) ~= "string" then return "consumer_name must be a string" end
  end
  return nil
end

local function join_sizes(sizes)
  table.sort(sizes)
  local out = {}
  for i = 1, #sizes do out[i] = int_text(sizes[i]) end
  return table.concat(out, " or ")
end

-- The extras sizes the server accepts here (the deletion's depend on the negotiation), as a
-- set and as text, and the extras layout of size `extlen` among them.
local function allowed_extras(shape, ctx, extlen)
  if not shape.extras_context or ctx == nil or delete_v2(ctx) == nil then
    return shape.size_set, shape.sizes_text, shape.extras_by_size[extlen]
  end
  local sizes, seen, extras = {}, {}, nil
  for i = 1, #shape.extras do
    local lay = shape.extras[i]
    if layout_allowed(lay, ctx) then
      if not seen[lay.size] then sizes[#sizes + 1], seen[lay.size] = lay.size, true end
      if lay.size == extlen then extras = lay end
    end
  end
  return seen, join_sizes(sizes), extras
end

local function layout_rule(lays, label, name, add)
  for i = 1, #lays do
    local lay = lays[i]
    if lay.label == label and lay.rule then add(lay.rule, name .. ": " .. lay.note) end
  end
end

local function verify_header(m, shape, ctx, add)
  local name = m.spec.name
  local seen, sizes_text, extras = allowed_extras(shape, ctx, m.extlen)
  if not seen[m.extlen] then
    add("extras-length", fmt("%s: extras length %d, must be %s", name, m.extlen, sizes_text))
    return
  end
  -- key
  local coll = nil
  if ctx then coll = collections(ctx) end
  if shape.key == "required" and m.keylen == 0 then
    add("key-presence", name .. ": no key, one is required")
  elseif shape.key == "forbidden" and m.keylen ~= 0 then
    add("key-presence", fmt("%s: a %d-byte key is not allowed", name, m.keylen))
  else
    local limit = MAX_COLLECTIONS_KEY_LENGTH
    if coll == false then limit = MAX_KEY_LENGTH end
    if m.keylen > limit then
      add("key-too-long", fmt("%s: key of %d bytes, at most %d", name, m.keylen, limit))
    elseif shape.document_key and coll then
      local problem = document_key_problem(tvb_raw(m.tvb, m.key_at, m.keylen))
      if problem then add("document-key-invalid", name .. ": " .. problem) end
    end
  end
  -- value
  local value = shape.value
  if extras and extras.value then value = extras.value end
  if shape.value_context == "collections" and ctx and coll == false then value = "forbidden" end
  if value == "required" and m.value_len == 0 then
    add("value-presence", name .. ": no value, one is required")
  elseif value == "forbidden" and m.value_len ~= 0 then
    local why = ""
    if shape.value ~= "forbidden" and shape.value_context then why = " (HELLO did not enable Collections)" end
    add("value-presence", fmt("%s: a %d-byte value is not allowed%s", name, m.value_len, why))
  elseif shape.value_min > 0 and m.value_len < shape.value_min then
    add("value-length", fmt("%s: value of %d bytes, at least %d required", name, m.value_len, shape.value_min))
  end
  if m.value_problem then add("value-length", name .. ": " .. m.value_problem) end
  -- CAS
  if shape.cas == "required" and m.cas_zero then
    add("cas-invalid", name .. ": CAS 0, the request must carry one")
  elseif shape.cas == "forbidden" and not m.cas_zero then
    add("cas-invalid", fmt("%s: CAS %s, must be 0", name, int_text(m.cas_range:uint64())))
  end
  -- datatype
  if m.datatype > 7 or (shape.datatypes and not shape.datatypes[m.datatype]) then
    add("datatype-invalid", fmt("%s: datatype 0x%02x not allowed", name, m.datatype))
  elseif ctx and enabled_datatypes(ctx) and band(m.datatype, bnot(enabled_datatypes(ctx))) ~= 0 then
    add("datatype-not-negotiated", fmt("%s: datatype bits 0x%02x not enabled by HELLO", name,
        u32(band(m.datatype, bnot(enabled_datatypes(ctx))))))
  end
  -- xattr blob
  if band(m.datatype, 4) ~= 0 and m.datatype <= 7 then
    local value, problem = tvb_raw(m.tvb, m.val_at, m.value_len), nil
    if band(m.datatype, 2) ~= 0 then
      local n = snappy_length(value)
      if n == nil or n < 4 then problem = "snappy value too short for an xattr blob" end
    else
      problem = xattr_problem(value)
    end
    if problem then add("xattr-invalid", name .. ": " .. problem) end
  end
  -- frame infos: the first one the server refuses
  for i = 1, #m.infos do
    local id, len = m.infos[i][1], m.infos[i][2]
    local what = fmt("%s: frame info %d (%s)", name, id, REQUEST_FRAME_INFO_NAMES[id] or "unknown")
    local legal = FRAME_INFO_SIZES[id]
    if legal == nil then
      add("frame-info-unknown", what .. " is not one the server knows") break
    elseif FRAME_INFOS_NOT_FOR_DCP[id] then
      add("frame-info-not-supported", what .. " is not supported by this opcode") break
    elseif (legal == "+" and len == 0) or (legal ~= "+" and not legal[len]) then
      add("frame-info-invalid", fmt("%s with %d bytes of data", what, len)) break
    end
  end
  -- a documented layout the server rejects
  if m.layout then
    layout_rule(shape.extras, m.layout, name, add)
    layout_rule(shape.values, m.layout, name, add)
  end
  if m.opcode == 0x50 and m.value_len > 0 then
    local problem = open_value_problem(m)
    if problem then add("open-value-invalid", "DcpOpen: " .. problem) end
  end
end

-- verify_common_dcp_restrictions and the opcodes memcached refuses from clients
local function connection_rules(m, spec, ctx, add)
  if spec.server_rejects then
    add("unsupported-on-server", fmt("%s sent to the server (answered %s)", spec.name, spec.server_rejects))
    return
  end
  if m.stream_id and is_consumer(ctx) then
    add("stream-id-on-consumer", fmt("%s with stream id %d on a consumer connection", spec.name, m.stream_id))
  end
  if m.opcode == 0x50 then
    if ctx.dcp then add("dcp-open-twice", "DcpOpen on a connection already opened for DCP") end
  elseif m.opcode ~= 0x96 and ctx.dcp == false then
    add("dcp-not-open", spec.name .. " on a connection that sent no DcpOpen since its start")
  end
end

-- verify_header without a negotiation, skipped for a header like one that passed: what it
-- judges then is the shape, the lengths' classes, datatype, CAS and layout (the message has
-- no frame infos, no xattr and no decoding problem).
local passed, n_passed = {}, 0   -- shape -> layout -> header signature -> true
local MAX_PASSED = 4096

local function verify_header_seen(m, shape, add)
  local sig = (m.extlen * 256 + m.datatype) * 32 + (m.keylen == 0 and 1 or 0)
      + (m.keylen > MAX_COLLECTIONS_KEY_LENGTH and 2 or 0) + (m.value_len == 0 and 4 or 0)
      + (m.value_len < shape.value_min and 8 or 0) + (m.cas_zero and 16 or 0)
  local by_layout = passed[shape]
  if by_layout == nil then by_layout = {} passed[shape] = by_layout end
  local sigs = by_layout[m.layout or ""]
  if sigs == nil then sigs = {} by_layout[m.layout or ""] = sigs end
  if sigs[sig] then return end
  local found = 0
  verify_header(m, shape, nil, function(rule, text) found = found + 1 add(rule, text) end)
  if found == 0 and n_passed < MAX_PASSED then
    sigs[sig], n_passed = true, n_passed + 1
  end
end

local function check_message(m, ctx, from_client, add)
  if m.overrun then
    add("header-invariant", fmt("framing extras %d + extras %d + key %d exceed body length %d",
        m.framing_len, m.extlen, m.keylen, m.bodylen))
  end
  if m.frame_error then add("framing-extras-encoding", "bad framing extras: " .. m.frame_error) end
  local spec = m.spec
  if not spec then
    if not SERVER_MAGIC[m.magic] and not OPCODE_NAMES[m.opcode] then
      add("unknown-opcode", fmt("opcode 0x%02x is not a known opcode", m.opcode))
    end
    return
  end
  if m.overrun or m.truncated then return end
  local shape = m.request and spec.req or spec.rsp
  local rctx = nil
  if from_client then rctx = ctx end
  if m.request and shape.validated then
    if rctx == nil and #m.infos == 0 and band(m.datatype, 4) == 0 and m.opcode ~= 0x50
        and not m.value_problem and not m.frame_error then
      verify_header_seen(m, shape, add)
    else
      verify_header(m, shape, rctx, add)
    end
    if from_client then connection_rules(m, spec, ctx, add) end
  else
    if m.extras_problem then add("extras-length", spec.name .. ": " .. m.extras_problem) end
    if m.value_problem then add("value-length", spec.name .. ": " .. m.value_problem) end
    if m.request and from_client and spec.server_rejects then connection_rules(m, spec, ctx, add) end
  end
  local checks = shape.checks
  for i = 1, #checks do
    local c = checks[i]
    if not check_passes(c, m) then add(c.rule, render_text(c.text, m)) end
  end
end
