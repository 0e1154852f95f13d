-- The part of Wireshark's Lua API that lua/dcpdissect.lua uses, in plain Lua, so that the
-- plugin runs in Debian's lua5.2 and lua5.4 interpreters (tests/test_lua_versions.py).
-- It records what the plugin shows: the tree, expert infos and the Info column.
--
-- Numbers read from packet bytes (TvbRange:uint, pinfo ports) are integers, or floats when
-- WS_FLOAT_NUMBERS=1: a Wireshark that pushes them as lua_Number gives floats from Lua 5.3
-- on, and the plugin must show the same either way. BitOp's `bit` returns signed 32-bit
-- results, as Wireshark's does.

local ws = {}
local FLOAT = os.getenv("WS_FLOAT_NUMBERS") == "1" and math.type ~= nil
local TWO32 = 4294967296

local function number(v)
  if FLOAT then return v + 0.0 end
  return v
end

-- bit (BitOp) ---------------------------------------------------------------------------
local ops
if bit32 then
  ops = bit32
else   -- Lua 5.3+: native operators, in a chunk that Lua 5.2 never parses
  ops = load([[return {
    band = function(a, b) return (a & b) & 0xFFFFFFFF end,
    bor = function(a, b) return (a | b) & 0xFFFFFFFF end,
    bnot = function(a) return (~a) & 0xFFFFFFFF end,
    rshift = function(a, n) return (a & 0xFFFFFFFF) >> n end,
    lshift = function(a, n) return (a << n) & 0xFFFFFFFF end}]])()
end
local function tobit(x)
  x = x % TWO32
  if x >= 2147483648 then x = x - TWO32 end
  if math.tointeger then x = math.tointeger(x) or x end
  return x
end
local function int(x)
  if math.tointeger then
    local i = math.tointeger(x)
    if i == nil then error("number has no integer representation", 3) end
    return i
  end
  return x
end
bit = {
  band = function(a, b) return tobit(ops.band(int(a) % TWO32, int(b) % TWO32)) end,
  bor = function(a, b) return tobit(ops.bor(int(a) % TWO32, int(b) % TWO32)) end,
  bnot = function(a) return tobit(ops.bnot(int(a) % TWO32)) end,
  rshift = function(a, n) return tobit(ops.rshift(int(a) % TWO32, n)) end,
  lshift = function(a, n) return tobit(ops.lshift(int(a) % TWO32, n)) end,
}

-- UInt64 ----------------------------------------------------------------------------------
local U64 = {}
U64.__index = U64
local function u64(hi, lo) return setmetatable({hi = hi, lo = lo}, U64) end
function U64:tonumber() return number(self.hi * TWO32 + self.lo) end
function U64:tohex(n)
  local s = string.format("%08X%08X", self.hi, self.lo)
  return string.sub(s, 17 - (n or 16))
end
U64.__tostring = function(v)          -- exact decimal, by long division of the 32-bit halves
  local hi, lo, digits = v.hi, v.lo, {}
  repeat
    local r = hi % 10
    hi = (hi - r) / 10
    local cur = r * TWO32 + lo
    local d = cur % 10
    lo = (cur - d) / 10
    digits[#digits + 1] = string.format("%d", d)
  until hi == 0 and lo == 0
  return string.reverse(table.concat(digits))
end
U64.__eq = function(a, b) return a.hi == b.hi and a.lo == b.lo end
U64.__lt = function(a, b) return a.hi < b.hi or (a.hi == b.hi and a.lo < b.lo) end
U64.__le = function(a, b) return a.hi < b.hi or (a.hi == b.hi and a.lo <= b.lo) end
UInt64 = {new = function(lo, hi) return u64(hi or 0, lo or 0) end}

NSTime = {new = function(secs, nsecs)
  return setmetatable({secs = secs, nsecs = nsecs}, {__tostring = function(t)
    return string.format("%d.%09d s", t.secs, t.nsecs)
  end})
end}

-- Tvb and TvbRange ---------------------------------------------------------------------------
local Range = {}
Range.__index = Range
local function be(data, at, n)
  local v = 0
  for i = at + 1, at + n do v = v * 256 + string.byte(data, i) end
  return v
end
function Range:uint() return number(be(self.parent.data, self.offset, self.length)) end
function Range:le_uint() return number(be(string.reverse(self:raw()), 0, self.length)) end
function Range:uint64()
  local s = string.rep("\0", 8 - self.length) .. self:raw()
  return u64(be(s, 0, 4), be(s, 4, 4))
end
function Range:raw() return string.sub(self.parent.data, self.offset + 1, self.offset + self.length) end
function Range:len() return number(self.length) end
function Range:offset() return number(self.offset) end
function Range:tvb() return ws.tvb(self:raw()) end
TvbRange = Range

local TvbMeta = {}
TvbMeta.__index = TvbMeta
function TvbMeta:range(offset, length)
  local r = setmetatable({parent = self, offset = offset or 0}, Range)
  r.length = length or (#self.data - r.offset)
  if r.offset < 0 or r.length < 0 or r.offset + r.length > #self.data then
    error("Range is out of bounds", 2)
  end
  return r
end
TvbMeta.__call = TvbMeta.range
function TvbMeta:len() return number(#self.data) end
function TvbMeta:reported_len() return number(self.reported) end
function TvbMeta:raw(offset, length) return self:range(offset, length):raw() end
Tvb = TvbMeta
function ws.tvb(data, reported)
  return setmetatable({data = data, reported = reported or #data}, TvbMeta)
end

-- Fields, protocols, expert infos, preferences, dissector tables ------------------------------
local function names(kind)
  return setmetatable({}, {__index = function(_, k) return kind .. "." .. k end})
end
base, expert = names("base"), {group = names("group"), severity = names("severity")}
DESEGMENT_ONE_MORE_SEGMENT = 0x0fffffff

local function field_ctor(ftype)
  return function(abbrev, label) return {abbrev = abbrev, label = label, ftype = ftype} end
end
ProtoField = setmetatable({}, {__index = function(t, ftype)
  local ctor = field_ctor(ftype)
  rawset(t, ftype, ctor)
  return ctor
end})
ProtoExpert = {new = function(abbrev, text, group, severity)
  return {abbrev = abbrev, text = text, severity = severity}
end}
Pref = {range = function(_, default) return default end,
        uint = function(_, default) return default end,
        bool = function(_, default) return default end,
        string = function(_, default) return default end}

ws.protos = {}
function Proto(name, description)
  local p = {name = name, description = description, abbrev = name, prefs = {}, fields = {},
             experts = {}, proto = true}
  ws.protos[name] = p
  return p
end

ws.tables = {}
DissectorTable = {get = function(name)
  local t = ws.tables[name]
  if t == nil then
    local entries = {}
    t = {entries = entries,
         add = function(self, port, d) entries[port] = d end,
         remove = function(self, port) entries[port] = nil end,
         get_dissector = function(self, port) return entries[port] end}
    ws.tables[name] = t
  end
  return t
end}

-- Wireshark's built-in Couchbase dissector: a node with the bytes it was given, its Info text
-- and protocol column.
local couchbase = {call = function(self, tvb, pinfo, tree)
  local item = tree:add({abbrev = "couchbase"}, tvb:range(0, #tvb.data))
  item:set_text(string.format("Couchbase Protocol, %d bytes", #tvb.data))
  pinfo.cols.protocol = "Couchbase"
  pinfo.cols.info:set(string.format("Couchbase opcode 0x%02x", string.byte(tvb.data, 2)))
  return #tvb.data
end}
Dissector = {get = function(name)
  if name == "couchbase" then return couchbase end
  error("Dissector.get: No such dissector: " .. name, 2)
end}

ws.postdissectors = {}
function register_postdissector(p) ws.postdissectors[#ws.postdissectors + 1] = p end

ws.field_values = {}    -- "tcp.stream" -> value for the packet being dissected
Field = {new = function(name)
  return function()
    local v = ws.field_values[name]
    if v == nil then return nil end
    return {value = v}
  end
end}

-- The tree ----------------------------------------------------------------------------------
local Item = {}
Item.__index = Item
TreeItem = Item

-- A value as Wireshark shows it: whole numbers alike however the plugin computed them.
local function shown(v)
  if type(v) == "number" then
    if v ~= math.floor(v) then return "non-integer " .. string.format("%.17g", v) end
    return string.format("%d", v)
  end
  return tostring(v)
end

function Item:add(what, range, value, ...)
  if getmetatable(range) ~= Range then      -- tree:add(field, value): no bytes
    range, value = nil, range
  end
  local child = {what = what, range = range, value = value, text = nil, children = {},
                 experts = {}, generated = false, extra = select("#", ...)}
  setmetatable(child, Item)
  self.children[#self.children + 1] = child
  return child
end
function Item:set_text(text) self.text = text return self end
function Item:append_text(text) self.text = (self.text or "") .. "+" .. text return self end
function Item:set_generated() self.generated = true return self end
function Item:add_proto_expert_info(e, text)
  self.experts[#self.experts + 1] = {e.severity, e.abbrev, text or e.text}
  return self
end

function ws.tree() return setmetatable({children = {}, experts = {}}, Item) end

local function label(node)
  local what = node.what
  local out
  if type(what) == "string" then
    out = "text " .. what                     -- item:add(range, "text")
  else
    out = (what.abbrev or "?")
  end
  if node.range then out = out .. string.format(" @%d+%d", node.range.offset, node.range.length) end
  if node.value ~= nil then out = out .. " = " .. shown(node.value) end
  if node.text then out = out .. " \"" .. node.text .. "\"" end
  if node.generated then out = out .. " [generated]" end
  return out
end

function ws.dump(node, indent, out)
  for _, e in ipairs(node.experts) do
    out[#out + 1] = indent .. "expert " .. e[1] .. " " .. e[2] .. " " .. e[3]
  end
  for _, child in ipairs(node.children) do
    out[#out + 1] = indent .. label(child)
    ws.dump(child, indent .. "  ", out)
  end
  return out
end

-- Packet info -------------------------------------------------------------------------------
local Column = {}
Column.__index = Column
Column.__tostring = function(c) return c.text end
function Column:set(text) self.text = text end
function Column:append(text) self.text = self.text .. text end

local Address = {__tostring = function(a) return a.text end}

function ws.pinfo(frame, src, sport, dst, dport)
  local cols = {info = setmetatable({text = ""}, Column)}
  return {number = frame, abs_ts = 1700000000 + frame / 1000, visited = false, can_desegment = 0, desegment_offset = 0,
          desegment_len = 0, src = setmetatable({text = src}, Address),
          dst = setmetatable({text = dst}, Address), src_port = number(sport),
          dst_port = number(dport), cols = cols}
end

return ws
