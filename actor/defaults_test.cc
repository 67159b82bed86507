// The compiled-in defaults parse (a typo would abort every actor at start)
// and keep the rollout contained: a default that ran the agent's shell
// unconfined would be a silent security regression.
#include "actor/defaults.h"

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace kernelrl::actor {
namespace {

TEST(ActorDefaultsTest, ParseStrictlyAndContainTheShell) {
  v1::ActorConfig strict;
  google::protobuf::TextFormat::Parser parser;
  ASSERT_TRUE(parser.ParseFromString(kActorDefaultsText, &strict));
  const v1::ActorConfig d = ActorDefaults();
  EXPECT_EQ(d.SerializeAsString(), strict.SerializeAsString());
  EXPECT_TRUE(d.rollout().isolation().contain());
  EXPECT_GT(d.rollout().isolation().data_bytes(), 0);
  EXPECT_GT(d.rollout().max_turns(), 0);
  EXPECT_GT(d.rollout().eval_max_turns(), 0);
  EXPECT_FALSE(d.has_server()) << "each main has its own ports";
}

}  // namespace
}  // namespace kernelrl::actor
