// A Case assembled from closures, for studies whose arms differ only in what they allocate, run and
// check. Every hook is optional except on_run.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvf/study.hpp"

namespace kvf {

class FnCase final : public Case {
 public:
  std::function<void(Backend&)> on_setup, on_run, on_teardown, on_before;
  std::function<void(Backend&)> on_verify;  // throws VerifyError
  std::function<std::string(Backend&, const Summary&, const std::string&)> on_after;

  void setup(Backend& be) override { if (on_setup) on_setup(be); }
  bool has_verify() const override { return static_cast<bool>(on_verify); }
  void verify(Backend& be) override { on_verify(be); }
  void before_sample(Backend& be) override { if (on_before) on_before(be); }
  void run(Backend& be) override { on_run(be); }
  void teardown(Backend& be) override { if (on_teardown) on_teardown(be); }
  std::string after_measure(Backend& be, const Summary& s, const std::string& mode) override {
    return on_after ? on_after(be, s, mode) : std::string{};
  }
};

// Appends a new FnCase named `name` with `params` to `out` and returns it for filling in.
inline FnCase& add_fn_case(std::vector<std::unique_ptr<Case>>& out, std::string name, std::vector<Param> params) {
  auto c = std::make_unique<FnCase>();
  c->name = std::move(name);
  c->params = std::move(params);
  auto& ref = *c;
  out.push_back(std::move(c));
  return ref;
}

}  // namespace kvf
