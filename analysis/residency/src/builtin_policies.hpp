// The built-in policies' factories, for the registry (registry.cpp).
#pragma once
#include <memory>

#include "kvf/residency/policy.hpp"

namespace kvf::residency {

std::unique_ptr<Policy> make_lru();
std::unique_ptr<Policy> make_lru_host();
std::unique_ptr<Policy> make_oracle();
std::unique_ptr<Policy> make_cost();

}  // namespace kvf::residency
