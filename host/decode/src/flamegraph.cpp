// kthost report --flamegraph: the profile's folded stacks drawn by kt_flame.
#include "kthost/decode/report.h"

namespace kt {

std::string flamegraph_svg(const Profile& p, const Symbolizer& symbols, const std::string& title) {
  FlameOptions o;
  o.title = title;
  return flame_svg(folded_stacks_of(p, symbols), o);
}

}  // namespace kt
