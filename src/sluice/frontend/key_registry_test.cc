#include "sluice/frontend/key_registry.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice::frontend {
namespace {

// SHA-256 of "demo-hashed-key".
constexpr char kHash[] = "01bc727c90fb6f9cf915487e84abeb3ba1339efc6ba94f928583977a76bab05e";

class KeyRegistryTest : public ::testing::Test {
 protected:
  void AddPlain(std::string key, std::string subject) {
    config_.keys.push_back({.key = std::move(key), .subject = std::move(subject), .plan = "free"});
  }
  void AddHashed(std::string hex, std::string subject) {
    config_.keys.push_back(
        {.key_sha256 = std::move(hex), .subject = std::move(subject), .plan = "free"});
  }
  // Builds the registry from config_; it lives as long as the fixture, like Find's pointers.
  const KeyRegistry& Build() {
    absl::StatusOr<KeyRegistry> registry = KeyRegistry::FromConfig(config_);
    EXPECT_TRUE(registry.ok()) << registry.status();
    if (registry.ok()) registry_ = *std::move(registry);
    return registry_;
  }

  config::Config config_;
  KeyRegistry registry_;
};

TEST_F(KeyRegistryTest, FindsAPlaintextKey) {
  AddPlain("demo-free-key", "user-1");
  const KeyEntry* entry = Build().Find("demo-free-key");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->subject, "user-1");
  EXPECT_EQ(entry->plan, "free");
}

TEST_F(KeyRegistryTest, FindsAKeyConfiguredByItsSha256) {
  AddHashed(kHash, "user-2");
  const KeyEntry* entry = Build().Find("demo-hashed-key");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->subject, "user-2");
}

TEST_F(KeyRegistryTest, TheHashItselfIsNotAKey) {
  AddHashed(kHash, "user-2");
  EXPECT_EQ(Build().Find(kHash), nullptr);
}

TEST_F(KeyRegistryTest, AnUnknownKeyIsNotFound) {
  AddPlain("demo-free-key", "user-1");
  EXPECT_EQ(Build().Find("demo-free-kez"), nullptr);
}

TEST_F(KeyRegistryTest, AnEmptyKeyIsNotFound) {
  AddPlain("demo-free-key", "user-1");
  EXPECT_EQ(Build().Find(""), nullptr);
}

TEST_F(KeyRegistryTest, AKeyOfMaximumLengthIsFound) {
  AddPlain(std::string(kMaxApiKeyLength, 'k'), "user-1");
  EXPECT_NE(Build().Find(std::string(kMaxApiKeyLength, 'k')), nullptr);
}

TEST_F(KeyRegistryTest, AKeyLongerThanTheMaximumIsNotFound) {
  // Config validation refuses such a key; the registry refuses to look it up regardless.
  AddPlain(std::string(kMaxApiKeyLength + 1, 'k'), "user-1");
  EXPECT_EQ(Build().Find(std::string(kMaxApiKeyLength + 1, 'k')), nullptr);
}

TEST_F(KeyRegistryTest, KeepsEmailAndWebhook) {
  config_.keys.push_back({.key = "k-one",
                          .subject = "user:1",
                          .plan = "pro",
                          .email = "a@example.com",
                          .webhook = "https://e.com/h"});
  const KeyEntry* entry = Build().Find("k-one");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->plan, "pro");
  EXPECT_EQ(entry->email, "a@example.com");
  EXPECT_EQ(entry->webhook, "https://e.com/h");
}

TEST_F(KeyRegistryTest, CountsEveryKey) {
  AddPlain("demo-free-key", "user-1");
  AddHashed(kHash, "user-2");
  EXPECT_EQ(Build().size(), 2u);
}

TEST_F(KeyRegistryTest, RefusesAPlaintextKeyAndItsHashInTwoEntriesWithoutQuotingIt) {
  AddPlain("demo-free-key", "user-1");
  AddPlain("demo-hashed-key", "user-2");
  AddHashed(kHash, "user-3");
  absl::StatusOr<KeyRegistry> registry = KeyRegistry::FromConfig(config_);
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.status().message(), "keys[2]: duplicate key (same as keys[1])");
}

TEST_F(KeyRegistryTest, RefusesTheSamePlaintextKeyTwice) {
  AddPlain("demo-free-key", "user-1");
  AddPlain("demo-free-key", "user-2");
  absl::StatusOr<KeyRegistry> registry = KeyRegistry::FromConfig(config_);
  EXPECT_EQ(registry.status().message(), "keys[1]: duplicate key (same as keys[0])");
}

TEST_F(KeyRegistryTest, RefusesAHashThatIsNotHex) {
  AddHashed(std::string(64, 'g'), "user-1");
  absl::StatusOr<KeyRegistry> registry = KeyRegistry::FromConfig(config_);
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.status().message(), "keys[0].key_sha256: must be 64 hex digits");
}

TEST_F(KeyRegistryTest, RefusesAnEntryWithNeitherKeyNorHash) {
  config_.keys.push_back({.subject = "user-1", .plan = "free"});
  absl::StatusOr<KeyRegistry> registry = KeyRegistry::FromConfig(config_);
  EXPECT_EQ(registry.status().message(), "keys[0]: set exactly one of key and key_sha256");
}

TEST_F(KeyRegistryTest, ADuplicateNamesTheFirstEntryWithItsDigest) {
  AddPlain("demo-a", "user-1");
  AddHashed(kHash, "user-2");
  AddPlain("demo-b", "user-3");
  AddPlain("demo-hashed-key", "user-4");
  absl::StatusOr<KeyRegistry> registry = KeyRegistry::FromConfig(config_);
  EXPECT_EQ(registry.status().message(), "keys[3]: duplicate key (same as keys[1])");
}

TEST_F(KeyRegistryTest, FindsEachOfManyKeysAndEachSubjectOnce) {
  for (int i = 0; i < 20'000; ++i) {
    AddPlain(absl::StrCat("key-", i), absl::StrCat("user-", i % 5'000));
  }
  const KeyRegistry& registry = Build();
  EXPECT_EQ(registry.size(), 20'000u);
  EXPECT_EQ(registry.subjects().size(), 5'000u);
  for (int i = 0; i < 20'000; i += 997) {
    const KeyEntry* entry = registry.Find(absl::StrCat("key-", i));
    ASSERT_NE(entry, nullptr) << i;
    EXPECT_EQ(entry->subject, absl::StrCat("user-", i % 5'000));
  }
  EXPECT_EQ(registry.DigestsOf("user-7").size(), 4u);
}

}  // namespace
}  // namespace sluice::frontend
