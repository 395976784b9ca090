// Exponential back-off for retrying a domain whose trace failed: 1 s, 2 s,
// 4 s, ... up to a ceiling; a trace that ran long enough resets it.
#pragma once

#include <algorithm>

namespace kt {

class Backoff {
 public:
  explicit Backoff(double max_seconds = 60, double first_seconds = 1) : max_(max_seconds), first_(first_seconds) {}
  // The delay before the next try, and the one after it doubled.
  double next() {
    double d = std::min(current_ > 0 ? current_ : first_, max_);
    current_ = std::min(d * 2, max_);
    return d;
  }
  // A trace that ran for a while: the next failure starts from the first delay.
  void reset() { current_ = 0; }

 private:
  double max_, first_;
  double current_ = 0;
};

}  // namespace kt
