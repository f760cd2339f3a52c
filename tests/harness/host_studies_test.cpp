// kvf run's plan under --device all: a host-only study runs once (cli/run_host_studies.cpp).
#include <gtest/gtest.h>

#include "run_plan.hpp"

namespace {

using kvf::cli::DevicePlan;
using kvf::cli::StudyPlan;

DevicePlan gpu_plan(const std::string& label) {
  DevicePlan d;
  d.label = label;
  d.out = "runs/x/" + label;
  d.backend = "cuda";
  for (const char* name : {"stream", "access", "remote", "frontier"}) {
    StudyPlan s;
    s.study = name;
    s.backend = std::string(name) == "remote" ? "cpu" : "cuda";
    d.studies.push_back(s);
  }
  return d;
}

std::vector<std::string> names(const DevicePlan& d) {
  std::vector<std::string> v;
  for (const auto& s : d.studies) v.push_back(s.study);
  return v;
}

TEST(RunHostStudies, AHostOnlyStudyStaysInTheFirstGpuPlanOnly) {
  std::vector<DevicePlan> plans = {gpu_plan("dev0"), gpu_plan("dev1"), gpu_plan("dev2")};
  kvf::cli::measure_host_studies_once(plans);
  EXPECT_EQ(names(plans[0]), (std::vector<std::string>{"stream", "access", "remote", "frontier"}));
  EXPECT_TRUE(plans[0].notes.empty());
  for (std::size_t i = 1; i < plans.size(); ++i) {
    EXPECT_EQ(names(plans[i]), (std::vector<std::string>{"stream", "access", "frontier"}));
    ASSERT_EQ(plans[i].notes.size(), 1u);
    EXPECT_EQ(plans[i].notes[0], "kvf run: the remote study runs on the CPU backend whatever the device: measured "
                                 "once, in runs/x/dev0");
  }
}

TEST(RunHostStudies, OneDeviceOrACpuPlanKeepsEveryStudy) {
  std::vector<DevicePlan> one = {gpu_plan("")};
  kvf::cli::measure_host_studies_once(one);
  EXPECT_EQ(names(one[0]).size(), 4u);
  std::vector<DevicePlan> cpu = {gpu_plan("dev0"), gpu_plan("dev1")};
  cpu[1].backend = "cpu";
  for (auto& s : cpu[1].studies) s.backend = "cpu";
  kvf::cli::measure_host_studies_once(cpu);
  EXPECT_EQ(names(cpu[1]).size(), 4u);
}

TEST(RunHostStudies, AGpuRunWithAHostOnlyStudyRunsOnTheCpu) {
  std::vector<DevicePlan> plans = {gpu_plan("")};
  EXPECT_TRUE(kvf::cli::runs_on_cpu(plans));  // the remote study: its host threads are placed
  plans[0].studies.erase(plans[0].studies.begin() + 2);
  EXPECT_FALSE(kvf::cli::runs_on_cpu(plans));
  plans[0].backend = "cpu";
  EXPECT_TRUE(kvf::cli::runs_on_cpu(plans));
}

}  // namespace
