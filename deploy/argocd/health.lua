hs = { status = "Progressing", message = "Waiting for the operator" }
if obj.status ~= nil and obj.status.variants ~= nil then
  hs.status = "Healthy"
  hs.message = obj.status.summary
  for _, v in ipairs(obj.status.variants) do
    if v.state == "Invalid" or v.state == "Conflict" then
      hs.status = "Degraded"; hs.message = v.label .. ": " .. (v.message or v.state); break
    elseif v.state == "Progressing" then
      hs.status = "Progressing"
    end
  end
end
return hs
