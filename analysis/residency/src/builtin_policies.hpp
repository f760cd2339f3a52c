// The built-in policies' factories, for the registry (registry.cpp).
#pragma once
#include <cstdint>
#include <limits>
#include <memory>

#include "kvf/residency/policy.hpp"

namespace kvf::residency {

// A request index no block is referenced at again (the oracle's and cost's next-use tables).
inline constexpr std::uint32_t kNever = std::numeric_limits<std::uint32_t>::max();

std::unique_ptr<Policy> make_lru();
std::unique_ptr<Policy> make_lru_host();
std::unique_ptr<Policy> make_oracle();
std::unique_ptr<Policy> make_cost();

}  // namespace kvf::residency
