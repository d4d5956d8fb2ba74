// openfia internal: the flash-attention engine shared by every op.
#pragma once

#include <string>

#include "common/problem.h"

namespace openfia::internal {

// True when the engine computes `p` (else *why says which feature it lacks).
bool EngineSupports(const Problem& p, std::string* why);
// Same contract as RunReference; results are bitwise independent of the thread count.
void RunEngine(const Problem& p);

}  // namespace openfia::internal
