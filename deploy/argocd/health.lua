hs = { status = "Progressing", message = "Waiting for the operator" }
local generation = obj.metadata and obj.metadata.generation
if obj.status ~= nil and obj.status.variants ~= nil then
  local observed = obj.status.observedGeneration
  if generation ~= nil and (observed == nil or observed < generation) then
    -- The status is of an older spec: the operator has not acted on the latest one yet.
    hs.message = "Waiting for the operator to act on generation " .. generation
    return hs
  end
  hs.status = "Healthy"
  hs.message = obj.status.summary
  for _, v in ipairs(obj.status.variants) do
    if v.state == "Invalid" or v.state == "Conflict" then
      hs.status = "Degraded"; hs.message = v.label .. ": " .. (v.message or v.state); break
    elseif v.state == "Progressing" then
      hs.status = "Progressing"
    end
  end
  -- spec.rollout: a failed step is Degraded, a held rollout Suspended, a running one
  -- Progressing (a variant's own problem is named first).
  local rollout = obj.status.rollout
  if rollout ~= nil and hs.status ~= "Degraded" then
    if rollout.phase == "Degraded" then
      hs.status = "Degraded"; hs.message = "rollout: " .. (rollout.message or "a step failed")
    elseif rollout.phase == "Paused" then
      hs.status = "Suspended"; hs.message = "rollout: " .. (rollout.message or "paused")
    elseif rollout.phase == "Progressing" then
      hs.status = "Progressing"
      hs.message = "rollout of revision " .. rollout.revision .. " at step " .. rollout.step
    end
  end
  -- Condition SiteSilent: most of its devices went silent together (a power cut, a network
  -- fault): Degraded, after the variants' and the rollout's own problems.
  if hs.status ~= "Degraded" then
    for _, c in ipairs(obj.status.conditions or {}) do
      if c.type == "SiteSilent" and c.status == "True" then
        hs.status = "Degraded"; hs.message = "SiteSilent: " .. (c.message or "devices silent together"); break
      end
    end
  end
end
return hs
