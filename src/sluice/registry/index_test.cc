#include "sluice/registry/index.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sluice/registry/keys.h"

namespace sluice::registry {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

Subject MakeSubject(std::string id, std::string plan = "free") {
  Subject s;
  s.id = std::move(id);
  s.plan = std::move(plan);
  s.created_at = kT0;
  s.updated_at = kT0;
  return s;
}

Key MakeKey(uint64_t id, std::string subject, std::string_view plaintext) {
  Key k;
  k.id = id;
  k.subject = std::move(subject);
  k.digest = DigestOf(plaintext);
  k.prefix = std::string(plaintext.substr(0, 8));
  k.created_at = kT0;
  return k;
}

class IndexTest : public ::testing::Test {
 protected:
  void Put(std::string id, std::string plan = "free") { index_.PutSubject(MakeSubject(id, plan)); }
  void Add(uint64_t id, std::string subject, std::string_view plaintext) {
    index_.AddKey(MakeKey(id, std::move(subject), plaintext));
  }
  Index::KeyState State(std::string_view plaintext, absl::Time now = kT0) {
    return index_.FindByDigest(DigestOf(plaintext), now).state;
  }
  std::vector<std::string> Ids(const Index::Page& page) {
    std::vector<std::string> ids;
    for (const auto& s : page.subjects) ids.push_back(s->id);
    return ids;
  }

  Index index_;
};

TEST_F(IndexTest, UnknownDigestIsUnknown) {
  EXPECT_EQ(State("sk_nothing"), Index::KeyState::kUnknown);
  EXPECT_EQ(index_.FindByDigest(DigestOf("sk_nothing"), kT0).subject, nullptr);
}

TEST_F(IndexTest, KeyFindsItsSubject) {
  Subject s = MakeSubject("alice", "pro");
  s.email = "a@example.com";
  s.webhook = "https://example.com/hook";
  s.webhook_secret = "whsec_c2VjcmV0";
  s.metadata = R"({"team":"x"})";
  s.disabled = true;
  s.overrides = {{.limit = "daily", .quota = 7, .until = kT0 + absl::Hours(1)}};
  index_.PutSubject(s);
  Add(1, "alice", "sk_alice");
  const Index::KeyLookup found = index_.FindByDigest(DigestOf("sk_alice"), kT0);
  ASSERT_EQ(found.state, Index::KeyState::kValid);
  ASSERT_NE(found.subject, nullptr);
  EXPECT_EQ(found.subject->id, "alice");
  EXPECT_EQ(found.subject->plan, "pro");
  EXPECT_EQ(found.subject->email, "a@example.com");
  EXPECT_EQ(found.subject->webhook, "https://example.com/hook");
  EXPECT_EQ(found.subject->webhook_secret, "whsec_c2VjcmV0");
  EXPECT_EQ(found.subject->metadata, R"({"team":"x"})");
  EXPECT_TRUE(found.subject->disabled);
  ASSERT_EQ(found.subject->overrides.size(), 1u);
  EXPECT_EQ(found.subject->overrides[0].quota, 7);
  EXPECT_EQ(found.subject->overrides[0].until, kT0 + absl::Hours(1));
  EXPECT_EQ(found.subject->created_at, kT0);
}

TEST_F(IndexTest, PlainSubjectHasEmptyObjectMetadata) {
  Put("bob");
  EXPECT_EQ(index_.FindSubject("bob")->metadata, "{}");
}

TEST_F(IndexTest, FindKeyReturnsTheKeyAsAdded) {
  Put("alice");
  Key k = MakeKey(42, "alice", "sk_abcdefgh");
  k.name = "ci";
  k.expires_at = kT0 + absl::Hours(2);
  index_.AddKey(k);
  const std::optional<Key> found = index_.FindKey(42);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->subject, "alice");
  EXPECT_EQ(found->digest, k.digest);
  EXPECT_EQ(found->prefix, "sk_abcde");
  EXPECT_EQ(found->name, "ci");
  EXPECT_EQ(found->expires_at, kT0 + absl::Hours(2));
  EXPECT_EQ(found->created_at, kT0);
  EXPECT_FALSE(index_.FindKey(43).has_value());
}

TEST_F(IndexTest, ImportedKeyHasNoPrefix) {
  Put("alice");
  Key k = MakeKey(1, "alice", "sk_x");
  k.prefix = "";
  index_.AddKey(k);
  EXPECT_EQ(index_.FindKey(1)->prefix, "");
  EXPECT_FALSE(index_.FindKey(1)->expires_at.has_value());
}

TEST_F(IndexTest, KeyIsExpiredAtAndAfterExpiresAt) {
  Put("alice");
  Key k = MakeKey(1, "alice", "sk_a");
  k.expires_at = kT0 + absl::Seconds(10);
  index_.AddKey(k);
  EXPECT_EQ(State("sk_a", kT0 + absl::Seconds(10) - absl::Microseconds(1)),
            Index::KeyState::kValid);
  EXPECT_EQ(State("sk_a", kT0 + absl::Seconds(10)), Index::KeyState::kExpired);
  EXPECT_EQ(State("sk_a", kT0 + absl::Hours(10)), Index::KeyState::kExpired);
  EXPECT_EQ(index_.FindByDigest(DigestOf("sk_a"), kT0 + absl::Hours(1)).subject, nullptr);
}

TEST_F(IndexTest, RevokedKeyIsUnknown) {
  Put("alice");
  Add(1, "alice", "sk_a");
  Add(2, "alice", "sk_b");
  index_.RevokeKey(1);
  EXPECT_EQ(State("sk_a"), Index::KeyState::kUnknown);
  EXPECT_EQ(State("sk_b"), Index::KeyState::kValid);
  EXPECT_FALSE(index_.FindKey(1).has_value());
  EXPECT_FALSE(index_.HasDigest(DigestOf("sk_a")));
  EXPECT_EQ(index_.key_count(), 1u);
  ASSERT_EQ(index_.KeysOf("alice").size(), 1u);
  index_.RevokeKey(1);  // absent: nothing
  EXPECT_EQ(index_.key_count(), 1u);
}

TEST_F(IndexTest, KeysOfAreById) {
  Put("alice");
  Put("bob");
  Add(30, "alice", "sk_3");
  Add(10, "alice", "sk_1");
  Add(20, "alice", "sk_2");
  Add(15, "bob", "sk_b");
  std::vector<uint64_t> ids;
  for (const Key& k : index_.KeysOf("alice")) ids.push_back(k.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{10, 20, 30}));
  EXPECT_TRUE(index_.KeysOf("nobody").empty());
}

TEST_F(IndexTest, DeletingASubjectRevokesItsKeys) {
  Put("alice");
  Put("bob");
  Add(1, "alice", "sk_a1");
  Add(2, "alice", "sk_a2");
  Add(3, "bob", "sk_b");
  index_.DeleteSubject("alice");
  EXPECT_EQ(index_.FindSubject("alice"), nullptr);
  EXPECT_EQ(State("sk_a1"), Index::KeyState::kUnknown);
  EXPECT_EQ(State("sk_a2"), Index::KeyState::kUnknown);
  EXPECT_FALSE(index_.FindKey(1).has_value());
  EXPECT_EQ(State("sk_b"), Index::KeyState::kValid);
  EXPECT_EQ(index_.subject_count(), 1u);
  EXPECT_EQ(index_.key_count(), 1u);
  EXPECT_EQ(index_.CountOnPlan("free", 10, nullptr), 1u);
}

TEST_F(IndexTest, RecreatedSubjectHasNoOldKeys) {
  Put("alice");
  Add(1, "alice", "sk_a1");
  index_.DeleteSubject("alice");
  Put("alice");
  EXPECT_TRUE(index_.KeysOf("alice").empty());
  EXPECT_EQ(State("sk_a1"), Index::KeyState::kUnknown);
}

TEST_F(IndexTest, PutKeepsKeysAndANewLookupSeesTheChange) {
  Put("alice", "free");
  Add(1, "alice", "sk_a");
  const std::shared_ptr<const Subject> before = index_.FindByDigest(DigestOf("sk_a"), kT0).subject;
  Put("alice", "pro");
  const std::shared_ptr<const Subject> after = index_.FindByDigest(DigestOf("sk_a"), kT0).subject;
  EXPECT_EQ(before->plan, "free");  // a Subject handed out never changes
  EXPECT_EQ(after->plan, "pro");
  EXPECT_EQ(index_.KeysOf("alice").size(), 1u);
  EXPECT_EQ(index_.subject_count(), 1u);
  EXPECT_EQ(index_.CountOnPlan("free", 10, nullptr), 0u);
  EXPECT_EQ(index_.CountOnPlan("pro", 10, nullptr), 1u);
}

TEST_F(IndexTest, AddKeyToAnAbsentSubjectDoesNothing) {
  Add(1, "ghost", "sk_g");
  EXPECT_EQ(State("sk_g"), Index::KeyState::kUnknown);
  EXPECT_EQ(index_.key_count(), 0u);
}

TEST_F(IndexTest, AddKeyWithAnExistingDigestReplacesThatKey) {
  Put("alice");
  Put("bob");
  Add(1, "alice", "sk_same");
  Add(2, "bob", "sk_same");
  EXPECT_EQ(index_.FindByDigest(DigestOf("sk_same"), kT0).subject->id, "bob");
  EXPECT_FALSE(index_.FindKey(1).has_value());
  EXPECT_TRUE(index_.KeysOf("alice").empty());
  EXPECT_EQ(index_.key_count(), 1u);
}

TEST_F(IndexTest, ListPagesByIdWithCursor) {
  for (const char* id : {"d", "b", "a", "e", "c"}) Put(id);
  Index::Page page = index_.List("", "", 2);
  EXPECT_EQ(Ids(page), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(page.next_cursor, "b");
  page = index_.List("", page.next_cursor, 2);
  EXPECT_EQ(Ids(page), (std::vector<std::string>{"c", "d"}));
  page = index_.List("", page.next_cursor, 2);
  EXPECT_EQ(Ids(page), (std::vector<std::string>{"e"}));
  EXPECT_EQ(page.next_cursor, "");
}

TEST_F(IndexTest, ListExactlyFullLastPageHasNoCursor) {
  Put("a");
  Put("b");
  EXPECT_EQ(index_.List("", "", 2).next_cursor, "");
  EXPECT_EQ(index_.List("", "a", 1).next_cursor, "");
}

TEST_F(IndexTest, ListCursorNeedNotBeAnId) {
  for (const char* id : {"a", "b", "c"}) Put(id);
  EXPECT_EQ(Ids(index_.List("", "aa", 10)), (std::vector<std::string>{"b", "c"}));
}

TEST_F(IndexTest, ListFiltersByPlan) {
  Put("a", "free");
  Put("b", "pro");
  Put("c", "free");
  Put("d", "pro");
  Put("e", "pro");
  Index::Page page = index_.List("pro", "", 2);
  EXPECT_EQ(Ids(page), (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(page.next_cursor, "d");
  EXPECT_EQ(Ids(index_.List("pro", "d", 2)), (std::vector<std::string>{"e"}));
  EXPECT_TRUE(index_.List("gold", "", 2).subjects.empty());
}

TEST_F(IndexTest, CountOnPlanNamesTheFirstIds) {
  for (const char* id : {"d", "b", "a", "c"}) Put(id, "free");
  Put("z", "pro");
  std::vector<std::string> first;
  EXPECT_EQ(index_.CountOnPlan("free", 2, &first), 4u);
  EXPECT_EQ(first, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(index_.CountOnPlan("gold", 2, &first), 0u);
  EXPECT_TRUE(first.empty());
}

TEST_F(IndexTest, ReplaceSwapsEverything) {
  Put("old");
  Add(1, "old", "sk_old");
  std::vector<Subject> subjects = {MakeSubject("b", "pro"), MakeSubject("a")};
  std::vector<Key> keys = {MakeKey(10, "a", "sk_a"), MakeKey(11, "b", "sk_b"),
                           MakeKey(12, "ghost", "sk_ghost"), MakeKey(13, "a", "sk_a")};
  index_.Replace(subjects, keys);
  EXPECT_EQ(State("sk_old"), Index::KeyState::kUnknown);
  EXPECT_EQ(index_.FindSubject("old"), nullptr);
  EXPECT_EQ(index_.FindByDigest(DigestOf("sk_a"), kT0).subject->id, "a");
  EXPECT_EQ(index_.FindByDigest(DigestOf("sk_b"), kT0).subject->plan, "pro");
  EXPECT_EQ(State("sk_ghost"), Index::KeyState::kUnknown);  // its subject is absent
  EXPECT_EQ(index_.subject_count(), 2u);
  EXPECT_EQ(index_.key_count(), 2u);
  EXPECT_EQ(Ids(index_.List("", "", 10)), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(index_.CountOnPlan("free", 0, nullptr), 1u);
  // Writers keep working on the new contents.
  Add(14, "a", "sk_a2");
  index_.DeleteSubject("b");
  EXPECT_EQ(index_.KeysOf("a").size(), 2u);
  EXPECT_EQ(State("sk_b"), Index::KeyState::kUnknown);
}

TEST_F(IndexTest, ReplaceKeepsTheLastOfEqualSubjectIds) {
  index_.Replace(
      {MakeSubject("b"), MakeSubject("a", "first"), MakeSubject("c"), MakeSubject("a", "last")},
      {});
  EXPECT_EQ(index_.FindSubject("a")->plan, "last");
  EXPECT_EQ(index_.subject_count(), 3u);
  EXPECT_EQ(Ids(index_.List("", "", 10)), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(index_.CountOnPlan("first", 0, nullptr), 0u);
}

// Keys in subject order are joined by a merge, others through a map: both find every subject.
TEST_F(IndexTest, ReplaceFindsSubjectsForKeysInAnyOrder) {
  for (const bool in_order : {true, false}) {
    std::vector<Key> keys = {MakeKey(1, "a", "sk_1"), MakeKey(2, "a", "sk_2"),
                             MakeKey(3, "aa", "sk_3"), MakeKey(4, "c", "sk_4"),
                             MakeKey(5, "d", "sk_5")};
    if (!in_order) std::swap(keys[0], keys[3]);
    index_.Replace({MakeSubject("a"), MakeSubject("b"), MakeSubject("c"), MakeSubject("d")}, keys);
    EXPECT_EQ(index_.KeysOf("a").size(), 2u) << in_order;
    EXPECT_EQ(State("sk_3"), Index::KeyState::kUnknown) << in_order;  // no subject "aa"
    EXPECT_EQ(index_.FindByDigest(DigestOf("sk_4"), kT0).subject->id, "c") << in_order;
    EXPECT_EQ(index_.FindByDigest(DigestOf("sk_5"), kT0).subject->id, "d") << in_order;
    EXPECT_EQ(index_.key_count(), 4u) << in_order;
  }
}

TEST_F(IndexTest, ReplaceDropsKeysRepeatingAnIdOrADigest) {
  index_.Replace({MakeSubject("a")}, {MakeKey(1, "a", "sk_1"), MakeKey(1, "a", "sk_2"),
                                      MakeKey(3, "a", "sk_1"), MakeKey(4, "a", "sk_4")});
  EXPECT_EQ(index_.key_count(), 2u);
  EXPECT_EQ(State("sk_2"), Index::KeyState::kUnknown);
  EXPECT_FALSE(index_.FindKey(3).has_value());
  EXPECT_TRUE(index_.HasDigest(DigestOf("sk_1")));
  EXPECT_TRUE(index_.FindKey(4).has_value());
  index_.RevokeKey(1);
  index_.RevokeKey(4);
  EXPECT_EQ(index_.key_count(), 0u);
  EXPECT_FALSE(index_.HasDigest(DigestOf("sk_1")));
}

TEST_F(IndexTest, ManyKeysAcrossShardsAndSlotReuse) {
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 3000; ++i) Put(absl::StrCat("s", i));
    for (int i = 0; i < 3000; ++i) Add(i + 1, absl::StrCat("s", i), absl::StrCat("sk_", i));
    EXPECT_EQ(index_.key_count(), 3000u);
    for (int i = 0; i < 3000; i += 7) {
      EXPECT_EQ(index_.FindByDigest(DigestOf(absl::StrCat("sk_", i)), kT0).subject->id,
                absl::StrCat("s", i));
    }
    for (int i = 0; i < 3000; ++i) index_.DeleteSubject(absl::StrCat("s", i));
    EXPECT_EQ(index_.key_count(), 0u);
    EXPECT_EQ(index_.subject_count(), 0u);
  }
}

// Readers check, while a writer changes subjects and keys, that whatever they see is whole: a
// key found belongs to the subject it names, and a subject's fields come from one version.
TEST(IndexConcurrencyTest, ReadersSeeWholeRecordsWhileAWriterWrites) {
  Index index;
  constexpr int kSubjects = 64;
  auto version = [](int i, int v) {
    Subject s = MakeSubject(absl::StrCat("s", i), absl::StrCat("plan", v % 3));
    s.metadata = absl::StrCat(R"({"v":)", v, "}");
    s.email = absl::StrCat("v", v, "@example.com");
    return s;
  };
  for (int i = 0; i < kSubjects; ++i) {
    index.PutSubject(version(i, 0));
    index.AddKey(MakeKey(i + 1, absl::StrCat("s", i), absl::StrCat("sk_", i)));
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> seen{0};
  std::atomic<int> started{0};  // readers in their first pass (which always runs whole)
  auto reader = [&] {
    int64_t n = 0;
    for (bool first = true; first || !stop.load(std::memory_order_relaxed); first = false) {
      if (first)
        started.fetch_add(1);  // (a failed assertion below cannot leave the writer waiting)
      for (int i = 0; i < kSubjects; ++i) {
        const Index::KeyLookup found = index.FindByDigest(DigestOf(absl::StrCat("sk_", i)), kT0);
        if (found.state != Index::KeyState::kValid) continue;  // revoked for a moment
        ASSERT_EQ(found.subject->id, absl::StrCat("s", i));
        const std::string v = found.subject->metadata.substr(5, found.subject->metadata.size() - 6);
        ASSERT_EQ(found.subject->email, absl::StrCat("v", v, "@example.com"));
        ASSERT_EQ(found.subject->plan, absl::StrCat("plan", std::stoi(v) % 3));
        ++n;
      }
      const Index::Page page = index.List("", "", 10);
      for (const auto& s : page.subjects) ASSERT_FALSE(s->id.empty());
      ASSERT_LE(index.key_count(), static_cast<size_t>(kSubjects));
    }
    seen += n;
  };
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) readers.emplace_back(reader);
  // The writes start once every reader is reading, so they overlap however fast the writer is.
  while (started.load() < 3) std::this_thread::yield();
  for (int v = 1; v < 300; ++v) {
    const int i = v % kSubjects;
    index.PutSubject(version(i, v));
    index.RevokeKey(i + 1);
    index.AddKey(MakeKey(i + 1, absl::StrCat("s", i), absl::StrCat("sk_", i)));
    if (v % 50 == 0) {
      std::vector<Subject> subjects;
      std::vector<Key> keys;
      for (int j = 0; j < kSubjects; ++j) {
        subjects.push_back(version(j, v));
        keys.push_back(MakeKey(j + 1, absl::StrCat("s", j), absl::StrCat("sk_", j)));
      }
      index.Replace(std::move(subjects), std::move(keys));
    }
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_GT(seen.load(), 0);
  EXPECT_EQ(index.key_count(), static_cast<size_t>(kSubjects));
}

}  // namespace
}  // namespace sluice::registry
