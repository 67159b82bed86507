#include "data/ast_similarity.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/rng.h"

namespace kernelrl {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xFF51AFD7ED558CCDull;
  return h ^ (h >> 33);
}

// Hashes the subtree starting at *pos (preorder) and appends every subtree hash.
absl::StatusOr<uint64_t> Walk(const AstDump& d, int* pos, int depth, std::vector<uint64_t>* out) {
  if (*pos >= d.labels_size() || depth > 400) return absl::InvalidArgumentError("malformed AST dump");
  const int me = (*pos)++;
  uint64_t h = StableHash(d.labels(me));
  for (int c = 0; c < d.arity(me); ++c) {
    auto child = Walk(d, pos, depth + 1, out);
    if (!child.ok()) return child;
    h = Mix(h, *child);
  }
  h = Mix(h, static_cast<uint64_t>(d.arity(me)));
  out->push_back(h);
  return h;
}

}  // namespace

absl::StatusOr<AstFingerprint> Fingerprint(const AstDump& dump) {
  if (!dump.error().empty()) return absl::InvalidArgumentError(dump.error());
  if (dump.labels_size() == 0 || dump.labels_size() != dump.arity_size())
    return absl::InvalidArgumentError("empty or inconsistent AST dump");
  AstFingerprint fp;
  int pos = 0;
  auto root = Walk(dump, &pos, 0, &fp.subtrees);
  if (!root.ok()) return root.status();
  if (pos != dump.labels_size()) return absl::InvalidArgumentError("AST dump has trailing nodes");
  fp.root = *root;
  std::sort(fp.subtrees.begin(), fp.subtrees.end());
  return fp;
}

double Similarity(const AstFingerprint& a, const AstFingerprint& b) {
  if (a.subtrees.empty() && b.subtrees.empty()) return 1.0;
  size_t i = 0, j = 0, common = 0;
  while (i < a.subtrees.size() && j < b.subtrees.size()) {
    if (a.subtrees[i] == b.subtrees[j]) {
      ++common, ++i, ++j;
    } else if (a.subtrees[i] < b.subtrees[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return 2.0 * common / static_cast<double>(a.subtrees.size() + b.subtrees.size());
}

std::string HashText(uint64_t h) { return absl::StrFormat("%016x", h); }

void ReferenceSet::Add(std::string name, AstFingerprint fp) {
  names_.push_back(std::move(name));
  prints_.push_back(std::move(fp));
}

Nearest ReferenceSet::Closest(const AstFingerprint& fp) const {
  Nearest best;
  for (size_t i = 0; i < prints_.size(); ++i) {
    const double s = Similarity(fp, prints_[i]);
    if (s > best.similarity) best = {s, names_[i]};
  }
  return best;
}

}  // namespace kernelrl
