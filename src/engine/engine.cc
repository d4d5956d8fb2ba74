// openfia: engine entry points. The fast engine is being built (issue "fast CPU engine"); until a
// feature lands here, EngineSupports reports it and the driver runs the reference.
#include "engine/engine.h"
#include "openfia/runtime.h"

namespace openfia::internal {

bool EngineSupports(const Problem&, std::string* why) {
  if (why) *why = "the fast engine is not built yet";
  return false;
}

void RunEngine(const Problem&) {}

}  // namespace openfia::internal

namespace openfia {
std::string SimdTarget() { return "scalar"; }
}  // namespace openfia
