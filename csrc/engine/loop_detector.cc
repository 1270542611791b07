#include "loop_detector.h"

#include <algorithm>

#include "deferred.h"

namespace torch_tpu::engine {

namespace {
constexpr uint64_t kBase = 0x100000001B3ull;  // odd: invertible mod 2^64
}  // namespace

LoopDetector::Cut LoopDetector::record(uint64_t op) {
  size_t i = current_.size();
  if (i == 0) matching_ = !body_.empty();
  current_.push_back(op);
  // Op ids are aligned addresses: mixed so every bit counts in the hash.
  prefix_.push_back(prefix_.back() * kBase + mix(0, op));
  if (pow_.size() < prefix_.size()) pow_.push_back(pow_.back() * kBase);

  if (held_) {
    matching_ = false;
    return Cut::kNone;
  }
  matching_ = matching_ && i < body_.size() && body_[i] == op;
  if (matching_) {
    if (current_.size() < body_.size()) return Cut::kNone;
    if (body_by_request_) {
      pending_ = true;
      return Cut::kAtRequest;
    }
    return Cut::kNow;
  }
  if (found_ == 0) found_ = period();
  return found_ ? Cut::kNow : Cut::kNone;
}

size_t LoopDetector::period() const {
  size_t n = current_.size();
  if (n % 2 != 0 || n < 2 * kMinBody) return 0;
  size_t p = n / 2;
  uint64_t first = prefix_[p];
  uint64_t second = prefix_[n] - prefix_[p] * pow_[p];
  if (first != second) return 0;
  return std::equal(current_.begin(), current_.begin() + p, current_.begin() + p) ? p : 0;
}

void LoopDetector::flushing(bool requested) {
  // A cut that waited keeps the body's mode, whatever flushes it, so every
  // later iteration ends at the same point.
  if (!current_.empty() && !pending_) body_by_request_ = requested;
  pending_ = false;
}

void LoopDetector::restart() {
  if (found_) {
    body_.assign(current_.begin(), current_.begin() + found_);
    body_by_request_ = false;
  } else if (!current_.empty()) {
    body_.swap(current_);
  }
  current_.clear();
  prefix_.resize(1);
  found_ = 0;
  matching_ = false;
  pending_ = false;
}

}  // namespace torch_tpu::engine
