#!/usr/bin/env dnsjit
-- A lean decoder for `make bench` to measure Plumb against: dnsjit
-- (Debian's package) reads a capture and parses every DNS message's
-- header and its questions, nothing more. It does not reassemble TCP or
-- IP fragments, so it does less than `plumb dns`. Prints the counts.
local object = require("dnsjit.core.objects")
local input = require("dnsjit.input.mmpcap").new()
local layer = require("dnsjit.filter.layer").new()
local Dns = require("dnsjit.core.object.dns")
local Q = require("dnsjit.core.object.dns.q")
local Label = require("dnsjit.core.object.dns.label")

input:open(arg[2])
layer:producer(input)
local producer, ctx = layer:produce()
local q, labels = Q.new(), Label.new(127)
local messages, questions = 0, 0
while true do
    local obj = producer(ctx)
    if obj == nil then break end
    if obj:type() == "payload" and obj:cast().len > 0 then
        local protocol = obj.obj_prev
        local dns = Dns.new(obj)
        if protocol ~= nil and protocol.obj_type == object.TCP then
            dns.includes_dnslen = 1
        end
        if dns:parse_header() == 0 then
            messages = messages + 1
            for _ = 1, dns.qdcount do
                if dns:parse_q(q, labels, 127) ~= 0 then break end
                questions = questions + 1
            end
        end
    end
end
print(messages .. " messages, " .. questions .. " questions")
