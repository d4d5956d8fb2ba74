// openfia: engine entry points. The fast engine is being built (issue "fast CPU engine"); until a
// feature lands here, EngineSupports reports it and the driver runs the reference.
#include "engine/engine.h"
#include "openfia/runtime.h"

namespace openfia::internal {

bool EngineSupports(const Problem& p, std::string* why) {
  // SparseAttnSharedkv's second key source (problem.h k2/v2) is reference-only until the engine
  // streams it; a fast path that ignored key_source would silently attend the wrong tokens.
  if (!p.key_source.empty() || p.k2.cache.present()) {
    if (why) *why = "a second key source (SparseAttnSharedkv compressed cache)";
    return false;
  }
  if (why) *why = "the fast engine is not built yet";
  return false;
}

void RunEngine(const Problem&) {}

}  // namespace openfia::internal

namespace openfia {
std::string SimdTarget() { return "scalar"; }
}  // namespace openfia
