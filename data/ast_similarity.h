// Program similarity by Python AST: decontamination against KernelBench and
// dedup of the synthesised set.
//
// A program is the normalised AST of its Model class as data/harness/worker.py
// dumps it (preorder labels + child counts): local names, self-attribute
// names, constants, annotations and docstrings abstracted away; torch
// operator names, module classes and keyword names kept. Every subtree hashes
// to 64 bits from its label and its children's hashes. Similarity of two
// programs is the Dice coefficient of their subtree-hash multisets,
// 2 |A ∩ B| / (|A| + |B|): 1 for programs equal up to renaming and constants,
// and an edit of one operator changes only the subtrees on its path to the
// root. The dedup key is the root hash (same operators, same structure).
#ifndef KERNELRL_DATA_AST_SIMILARITY_H_
#define KERNELRL_DATA_AST_SIMILARITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/data.pb.h"

namespace kernelrl {

using ::kernelrl::v1::AstDump;

struct AstFingerprint {
  std::vector<uint64_t> subtrees;  // Sorted.
  uint64_t root = 0;
};

absl::StatusOr<AstFingerprint> Fingerprint(const AstDump& dump);
double Similarity(const AstFingerprint& a, const AstFingerprint& b);
std::string HashText(uint64_t h);  // 16 hex digits.

struct Nearest {
  double similarity = 0;
  std::string name;
};

// The decontamination set (KernelBench programs). Const after loading: Closest
// may run on many threads.
class ReferenceSet {
 public:
  void Add(std::string name, AstFingerprint fp);
  Nearest Closest(const AstFingerprint& fp) const;
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::vector<AstFingerprint> prints_;
};

}  // namespace kernelrl

#endif  // KERNELRL_DATA_AST_SIMILARITY_H_
