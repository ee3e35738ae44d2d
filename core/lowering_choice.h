// The lowering of a tunable node (OpDef::tuning): the variant a tuning record names wherever
// the record applies, each under its range's `when`, and the op's heuristic everywhere else; or
// one variant named for the node at every binding (`teeny tune` measuring it).
#pragma once

#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/op.h"
#include "core/tuning.h"

namespace teeny {

struct ChosenLowering {
  Lowering lowering;
  std::vector<BundleVariant> variants;  // what runs where, and why (for inspect)
};

// `tuning` may be null (no file); `forced` names the variant for every binding ("" : choose).
// Throws OpError("op", ...) where `forced` is not a variant of the node; a record whose variant
// the node cannot run is passed over, and the reason kept in the heuristic's `why`.
ChosenLowering lower_tunable(const OpDef& op, const OpContext& ctx, const TuningFile* tuning,
                             const std::string& forced);

}  // namespace teeny
