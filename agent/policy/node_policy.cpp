#include "agent/policy/node_policy.hpp"

#include <algorithm>
#include <cmath>

namespace ctrun::agent {

NodeFailures::Clock::duration NodeFailures::window() const {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settings_.window_s));
}

void NodeFailures::attempt_ended(bool failed_first, Clock::time_point now) {
  if (!failed_first || !enabled()) return;
  first_failures_.push_back(now);
  while (!first_failures_.empty() && now - first_failures_.front() > window()) first_failures_.pop_front();
}

bool NodeFailures::failing(bool failed_first, Clock::time_point now) const {
  if (!enabled() || !failed_first) return false;
  if (step_outs_ > 0 && now < probation_until_) return true;
  return static_cast<int>(first_failures_.size()) >= settings_.max_failures;
}

StepOutPlan NodeFailures::step_out() {
  ++step_outs_;
  StepOutPlan plan;
  plan.step_outs = step_outs_;
  plan.cooldown_s = std::min(settings_.cooldown_max_s,
                             settings_.cooldown_min_s * std::pow(2.0, std::min(step_outs_ - 1, 30)));
  plan.failures = first_failures_.size();
  plan.again = step_outs_ > 1 && plan.failures < static_cast<std::size_t>(settings_.max_failures);
  first_failures_.clear();
  return plan;
}

void NodeFailures::came_back(Clock::time_point now) { probation_until_ = now + window(); }

}  // namespace ctrun::agent
