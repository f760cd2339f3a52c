// The arm registry (kvf/arms.hpp): grids, user lists, the quick subset, names and parameter columns.
#include "kvf/arms.hpp"

#include <gtest/gtest.h>

#include "kvf/errors.hpp"

namespace {

struct Env {
  int max_rows = 65536;
  int made = 0;
};

class NopCase final : public kvf::Case {
 public:
  void run(kvf::Backend&) override {}
};

std::vector<std::string> names(const std::vector<kvf::Point>& ps, const char* fmt) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(kvf::format_name(fmt, p));
  return out;
}

kvf::Arm<Env> x_arm() {
  return kvf::Arm<Env>{
      .name = "x",
      .doc = "recompute from X",
      .axes = {{.name = "tokens", .cpu = {"128", "512"}, .gpu = {"16", "4096"}, .quick = {"128"}, .flag = "--tokens",
                .fixed = {"128"}},
               {.name = "pages", .cpu = {"1"}, .gpu = {"1", "64"}, .quick = {"1"}, .flag = "--pages"}},
      .valid = [](const kvf::Point& p, const Env& e) { return p.integer("tokens") * p.integer("pages") <= e.max_rows; },
      .case_name = "recompute/x/T{tokens}xP{pages}",
      .make =
          [](const kvf::Point& p, Env& e) {
            ++e.made;
            auto c = std::make_unique<NopCase>();
            c->params = {{"rows", std::to_string(p.integer("tokens") * p.integer("pages"))}};
            return c;
          }};
}

TEST(Arms, ProductLastAxisFastestAndDuplicatesDropped) {
  const kvf::Grid g = {kvf::Product{{{"a", {"1", "2"}}, {"b", {"x", "y"}}}}, kvf::Product{{{"a", {"2"}}, {"b", {"y", "z"}}}}};
  EXPECT_EQ(names(kvf::expand(g), "{a}{b}"), (std::vector<std::string>{"1x", "1y", "2x", "2y", "2z"}));
}

TEST(Arms, AnEmptyListMakesNoPoints) {
  EXPECT_TRUE(kvf::expand({kvf::Product{{{"a", {"1"}}, {"b", {}}}}}).empty());
}

TEST(Arms, DefaultsPerTargetAndValidity) {
  const kvf::ArmList<Env> list({x_arm()});
  Env env;
  const auto& x = list.at("x");
  EXPECT_EQ(names(list.points(x, {.gpu = false}, {}, env), "{tokens}/{pages}"),
            (std::vector<std::string>{"128/1", "512/1"}));
  env.max_rows = 4096;  // 4096 x 64 is dropped
  EXPECT_EQ(names(list.points(x, {.gpu = true}, {}, env), "{tokens}/{pages}"),
            (std::vector<std::string>{"16/1", "16/64", "4096/1"}));
  EXPECT_EQ(names(list.points(x, {.gpu = true, .quick = true}, {}, env), "{tokens}/{pages}"),
            (std::vector<std::string>{"128/1"}));
}

TEST(Arms, AnEverywhereAxisHasItsValuesOnEveryTargetAndInTheQuickSubset) {
  const kvf::Axis part = kvf::everywhere_axis("part", {"gather", "sequential"});
  for (bool gpu : {false, true})
    for (bool quick : {false, true})
      EXPECT_EQ(part.defaults({.gpu = gpu, .quick = quick}), (std::vector<std::string>{"gather", "sequential"})) << gpu << quick;
  EXPECT_TRUE(part.flag.empty());
}

TEST(Arms, UserListsReplaceTheGridOtherAxesFixed) {
  const kvf::ArmList<Env> list({x_arm()});
  Env env;
  const auto& x = list.at("x");
  // --pages alone: tokens at its fixed value, not the GPU defaults.
  EXPECT_EQ(names(list.points(x, {.gpu = true}, {{"--pages", {"2", "4"}}}, env), "{tokens}/{pages}"),
            (std::vector<std::string>{"128/2", "128/4"}));
  // --tokens alone: pages at the first of its defaults.
  EXPECT_EQ(names(list.points(x, {.gpu = true}, {{"--tokens", {"64"}}}, env), "{tokens}/{pages}"),
            (std::vector<std::string>{"64/1"}));
  // A flag of another arm changes nothing here.
  EXPECT_EQ(list.points(x, {}, {{"--copy-sizes", {"4KiB"}}}, env).size(), 2u);
}

TEST(Arms, QuickLeavesOutArmsWithoutQuickValuesEvenWithUserLists) {
  auto arm = x_arm();
  arm.axes[1].quick.clear();
  const kvf::ArmList<Env> list({arm});
  Env env;
  EXPECT_TRUE(list.points(list.at("x"), {.quick = true}, {{"--tokens", {"64"}}}, env).empty());
  EXPECT_EQ(list.points(list.at("x"), {.quick = false}, {{"--tokens", {"64"}}}, env).size(), 1u);
}

TEST(Arms, BackendsAnArmRunsOn) {
  auto arm = x_arm();
  arm.on_gpu = false;
  const kvf::ArmList<Env> list({arm});
  Env env;
  EXPECT_TRUE(list.points(list.at("x"), {.gpu = true}, {}, env).empty());
  EXPECT_FALSE(list.points(list.at("x"), {.gpu = false}, {}, env).empty());
}

TEST(Arms, DeclaredDefaultGridReplacesTheProduct) {
  auto arm = x_arm();
  arm.default_grid = [](const kvf::Target& t, const Env&) {
    if (t.quick) return kvf::Grid{};
    return kvf::Grid{kvf::Product{{{"tokens", {"16"}}, {"pages", {"8"}}}}, kvf::Product{{{"tokens", {"128"}}, {"pages", {"1"}}}}};
  };
  const kvf::ArmList<Env> list({arm});
  Env env;
  EXPECT_EQ(names(list.points(list.at("x"), {}, {}, env), "{tokens}/{pages}"), (std::vector<std::string>{"16/8", "128/1"}));
  EXPECT_TRUE(list.points(list.at("x"), {.quick = true}, {}, env).empty());
  EXPECT_EQ(names(list.points(list.at("x"), {}, {{"--pages", {"3"}}}, env), "{tokens}/{pages}"),
            (std::vector<std::string>{"128/3"}));
}

TEST(Arms, CasesTakeTheirNameAndColumnsFromTheDeclaration) {
  const kvf::ArmList<Env> list({x_arm()});
  Env env;
  std::vector<std::unique_ptr<kvf::Case>> out;
  list.add_cases(list.at("x"), {}, {}, env, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(env.made, 2);
  EXPECT_EQ(out[1]->name, "recompute/x/T512xP1");
  ASSERT_EQ(out[1]->params.size(), 3u);
  EXPECT_EQ(out[1]->params[0].name, "tokens");
  EXPECT_EQ(out[1]->params[1].name, "pages");
  EXPECT_EQ(out[1]->params[2].name, "rows");
  EXPECT_EQ(out[1]->params[2].value, "512");
}

TEST(Arms, FormatRefusesUnknownAxesAndLoneBraces) {
  const kvf::Point p(std::vector<kvf::Param>{{"a", "1"}});
  EXPECT_EQ(kvf::format_name("x{a}y", p), "x1y");
  EXPECT_THROW(kvf::format_name("{b}", p), std::logic_error);
  EXPECT_THROW(kvf::format_name("{a", p), std::logic_error);
  EXPECT_THROW(kvf::format_name("a}", p), std::logic_error);
}

TEST(Arms, PointValuesTyped) {
  kvf::Point p(std::vector<kvf::Param>{{"n", "12"}, {"f", "0.25"}, {"s", "abc"}});
  EXPECT_EQ(p.integer("n"), 12);
  EXPECT_DOUBLE_EQ(p.number("f"), 0.25);
  EXPECT_THROW(p.integer("s"), std::logic_error);
  EXPECT_THROW(p.integer("missing"), std::logic_error);
  p.set("s", "z");
  p.set("new", "1");
  EXPECT_EQ(p["s"], "z");
  EXPECT_EQ(p.values().back().name, "new");
}

TEST(Arms, UnknownArmIsOneLineNamingTheKnownOnes) {
  try {
    kvf::check_arm_names("--arms", {"x", "nope"}, {"x", "xq"});
    FAIL() << "no throw";
  } catch (const kvf::UsageError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("--arms"), std::string::npos) << w;
    EXPECT_NE(w.find("nope"), std::string::npos) << w;
    EXPECT_NE(w.find("x,xq"), std::string::npos) << w;
  }
}

}  // namespace
