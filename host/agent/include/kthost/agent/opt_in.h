// Which domains the agent traces. A domain opts in when it has the
// org.kthost.0 channel and either its name or the tag of its kthost metadata
// element matches one of the --match globs (every domain when there are
// none), unless its metadata says enabled='no'. Pure: unit-testable.
#pragma once

#include <string>
#include <vector>

#include "kthost/libvirt/domain_xml.h"

namespace kt {

struct OptInDecision {
  bool trace = false;
  std::string why;  // "name matches kthost-*", "no org.kthost.0 channel", ...
};

OptInDecision decide_opt_in(const DomainXml& xml, const std::vector<std::string>& match);

}  // namespace kt
