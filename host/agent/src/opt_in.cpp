#include "kthost/agent/opt_in.h"

#include <fnmatch.h>

#include "kthost_shared.h"

namespace kt {
namespace {

bool glob_matches(const std::string& pattern, const std::string& text) {
  return !text.empty() && ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

}  // namespace

OptInDecision decide_opt_in(const DomainXml& xml, const std::vector<std::string>& match) {
  if (xml.channel.empty()) return {false, "no " KTHOST_PORT_SIDEBAND " channel (add it to trace this domain)"};
  if (xml.has_agent_metadata && (xml.agent_enabled == "no" || xml.agent_enabled == "false"))
    return {false, "its kthost metadata says enabled='" + xml.agent_enabled + "'"};
  if (match.empty()) return {true, "every domain with the channel is traced (no --match)"};
  for (const auto& pattern : match) {
    if (glob_matches(pattern, xml.name)) return {true, "name matches " + pattern};
    if (xml.has_agent_metadata && glob_matches(pattern, xml.agent_tag))
      return {true, "metadata tag '" + xml.agent_tag + "' matches " + pattern};
  }
  std::string why = "neither its name";
  why += xml.has_agent_metadata && !xml.agent_tag.empty() ? " nor its metadata tag '" + xml.agent_tag + "'"
                                                          : " (and it has no kthost metadata tag)";
  return {false, why + " matches --match"};
}

}  // namespace kt
