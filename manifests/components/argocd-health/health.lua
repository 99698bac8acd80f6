-- Argo CD's health of a LinkerdConfig (argocd-cm key
-- resource.customizations.health.config.linkerd.io_LinkerdConfig), read from the conditions
-- the controller writes for kstatus: Ready=True is Healthy (the ConfigMaps hold the
-- configuration and every opted-in pod runs it); Stalled=True is Degraded (a halted or
-- rolled-back rollout, an invalid or conflicting LinkerdConfig: only a person moves it on);
-- a paused rollout is Suspended; anything else, a generation not yet observed included, is
-- Progressing.
local hs = {}
local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end
local function said(c)
  local message = c.message or ""
  if c.reason ~= nil and c.reason ~= "" then
    return c.reason .. ": " .. message
  end
  return message
end
if obj.status == nil or obj.status.observedGeneration == nil
    or obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local ready = condition("Ready")
local stalled = condition("Stalled")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end
if ready ~= nil and ready.reason == "Paused" then
  hs.status = "Suspended"
  hs.message = said(ready)
  return hs
end
hs.status = "Progressing"
if ready ~= nil then
  hs.message = said(ready)
else
  hs.message = "Waiting for the controller's first status"
end
return hs
