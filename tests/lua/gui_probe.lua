-- Loaded beside lua/dcpdissect.lua in Wireshark's GUI (tests/test_lua_gui.py): counts the
-- frames the plugin dissected and those with a Lua error (Wireshark's own or one the plugin
-- caught: "dcpdissect: ..."), and writes both to the file named by DCP_GUI_PROBE after every
-- frame.
local out = os.getenv("DCP_GUI_PROBE")
local seen, dcp, errors = {}, 0, 0
local tap = Listener.new("frame", "dcp || _ws.lua.error")
local lua_error = Field.new("_ws.lua.error")
local expert_message = Field.new("_ws.expert.message")

function tap.packet(pinfo)
  if seen[pinfo.number] then return end
  seen[pinfo.number] = true
  local failed = lua_error() ~= nil
  for _, m in ipairs({expert_message()}) do
    if string.find(tostring(m.value), "^dcpdissect: ") then failed = true end
  end
  if failed then errors = errors + 1 else dcp = dcp + 1 end
  local f = io.open(out, "w")
  f:write(string.format("dcp %d\nerrors %d\n", dcp, errors))
  f:close()
end
