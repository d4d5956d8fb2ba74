// openfia internal: dedicated decode kernels (few query rows per KV head, long key ranges).
//
// attend-inl.h's AVX-512 tile loop hands a work item to these first; each returns false when the
// item is not one it runs (then the generic loop runs it), so semantics never depend on them.
// C linkage: attend-inl.h is compiled inside per-target namespaces and names them from there.
#pragma once

#include "common/problem.h"
#include "engine/plan.h"
#include "simd/simd.h"

namespace openfia::internal {

extern "C" {
// AMX-BF16 decode (decode_amx.cc): runs `w` when the active kernel table is the AMX one and the
// item qualifies (see OpenfiaAmxDecodeCan); returns false without touching `out` otherwise.
bool OpenfiaAmxDecode(const Problem& p, const WorkItem& w, EngineScratch& sc,
                      const RowStates& out);
// Whether OpenfiaAmxDecode runs `w` under the AMX table (false when AMX is not compiled or not
// granted). For tests that must prove the path ran.
bool OpenfiaAmxDecodeCan(const Problem& p, const WorkItem& w);
}

}  // namespace openfia::internal
