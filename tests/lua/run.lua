-- lua5.x tests/lua/run.lua PLUGIN PDUS: run the Wireshark plugin over the messages in the file
-- PDUS (written by tests/test_lua_versions.py) and print what it shows for each.
--
-- PDUS has one message per line: frame, TCP stream, 1 when the client sent it, the client's
-- and the server's address and port, tcp.completeness (- when unknown), the reported length
-- and the captured bytes in hex.
package.path = (string.match(arg[0], "^(.*)/") or ".") .. "/?.lua;" .. package.path
local ws = require("wireshark")
dofile(arg[1])
local dcp = ws.protos.dcp
dcp.init()

local out = {}
for line in io.lines(arg[2]) do
  local frame, stream, client, caddr, cport, saddr, sport, complete, reported, hex =
      string.match(line, "^(%d+) (%d+) ([01]) (%S+) (%d+) (%S+) (%d+) (%S+) (%d+) (%x*)$")
  local data = string.gsub(hex, "%x%x", function(h) return string.char(tonumber(h, 16)) end)
  ws.field_values["tcp.stream"] = tonumber(stream)
  ws.field_values["tcp.completeness"] = tonumber(complete)
  local pinfo
  if client == "1" then
    pinfo = ws.pinfo(tonumber(frame), caddr, tonumber(cport), saddr, tonumber(sport))
  else
    pinfo = ws.pinfo(tonumber(frame), saddr, tonumber(sport), caddr, tonumber(cport))
  end
  local tree = ws.tree()
  dcp.dissector(ws.tvb(data, tonumber(reported)), pinfo, tree)
  out[#out + 1] = "frame " .. frame .. ": " .. tostring(pinfo.cols.info)
  ws.dump(tree, "  ", out)
end
io.write(table.concat(out, "\n"), "\n")
