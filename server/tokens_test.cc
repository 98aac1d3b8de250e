#include "server/tokens.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(TokensTest, FreshTokensHaveTheShapeAndNameTheirId) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<NewToken> t = GenerateToken();
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(t->token, MatchesRegex("ytk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}"));
    EXPECT_THAT(t->id, MatchesRegex("t-[0-9a-f]{12}"));
    absl::StatusOr<std::string> id = TokenId(t->token);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, t->id);
    EXPECT_EQ(t->digest, TokenDigest(t->token));
    EXPECT_EQ(t->digest.size(), 64u);
    EXPECT_EQ(t->digest.find(t->token), std::string::npos);
    EXPECT_TRUE(seen.insert(t->token).second) << "tokens must not repeat";
  }
}

TEST(TokensTest, MalformedTokensAreRefusedWithoutEchoingThem) {
  for (const std::string& bad : std::vector<std::string>
       {"", "Bearer x", "ytk_", "ytk_0123456789ab_short",
        "ytk_0123456789AB_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "ytk_0123456789ab-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "ytk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "xyz_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        std::string(100000, 'a')}) {
    absl::StatusOr<std::string> id = TokenId(bad);
    ASSERT_FALSE(id.ok()) << bad;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated);
    if (bad.size() > 8) {  // short ones may match the format hint
      EXPECT_EQ(std::string(id.status().message()).find(bad),
                std::string::npos);
    }
  }
}

TEST(TokensTest, DigestsCompareByValue) {
  EXPECT_TRUE(DigestsEqual(TokenDigest("a"), TokenDigest("a")));
  EXPECT_FALSE(DigestsEqual(TokenDigest("a"), TokenDigest("b")));
  EXPECT_FALSE(DigestsEqual("abc", "abcd"));
}

TEST(TokensTest, TenantNames) {
  for (const std::string& ok : std::vector<std::string>{"a", "team-a", "0ops", std::string(63, 'x')}) {
    EXPECT_TRUE(CheckTenantName(ok, "tenant").ok()) << ok;
  }
  for (const std::string& bad : std::vector<std::string>
       {"", "-a", "Team", "a b", "a_b", "a/b", std::string(64, 'x'), "é"}) {
    absl::Status s = CheckTenantName(bad, "tenant");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("tenant:"));
  }
}

}  // namespace
}  // namespace trainyard::server
