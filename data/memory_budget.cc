#include "data/memory_budget.h"

#include <algorithm>
#include <utility>

namespace kernelrl {

MemoryBudget::MemoryBudget(int units, int64_t bytes)
    : units_(std::max(1, units)), bytes_(std::max<int64_t>(0, bytes)), free_(units_) {}

MemoryBudget::Grant& MemoryBudget::Grant::operator=(Grant&& o) noexcept {
  if (this != &o) {
    Release();
    budget_ = std::exchange(o.budget_, nullptr);
    units_ = std::exchange(o.units_, 0);
  }
  return *this;
}

void MemoryBudget::Grant::Release() {
  if (budget_ != nullptr) std::exchange(budget_, nullptr)->Give(std::exchange(units_, 0));
}

int64_t MemoryBudget::Grant::bytes() const {
  if (budget_ == nullptr || budget_->bytes_ == 0) return 0;
  // The whole budget exactly (no rounding lost) when every unit is granted.
  return units_ == budget_->units_ ? budget_->bytes_ : units_ * budget_->unit_bytes();
}

MemoryBudget::Grant MemoryBudget::Acquire(int units) {
  units = std::clamp(units, 1, units_);
  absl::MutexLock l(&mu_);
  const uint64_t ticket = next_ticket_++;
  struct Ready {
    MemoryBudget* b;
    uint64_t ticket;
    int units;
  } ready{this, ticket, units};
  mu_.Await(absl::Condition(
      +[](Ready* r) {
        r->b->mu_.AssertHeld();
        return r->b->serving_ == r->ticket && r->b->free_ >= r->units;
      },
      &ready));
  free_ -= units;
  ++serving_;
  Grant g;
  g.budget_ = this;
  g.units_ = units;
  return g;
}

void MemoryBudget::Give(int units) {
  absl::MutexLock l(&mu_);
  free_ += units;
}

int MemoryBudget::free_units() const {
  absl::MutexLock l(&mu_);
  return free_;
}

int MemoryBudget::waiting() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(next_ticket_ - serving_);
}

int MemoryBudget::UnitsForAttempt(int attempt, int retries) const {
  if (attempt == 0) return 1;
  if (attempt >= retries) return units_;
  int u = 1;
  for (int i = 0; i < attempt && u < units_; ++i) u *= 4;
  return std::min(u, units_);
}

}  // namespace kernelrl
