#include "sluice/registry/index.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"

// Layout. A million subjects with a key each must fit in about 200 bytes apiece, so records are
// compact (times in microseconds, the plan as a number, rarely set fields behind one pointer) and
// live in arenas of fixed blocks that never move; the hash sets and the ordered set hold 32-bit
// slot numbers, with hash and comparison functors that look the record up.
//
// The Subject a decision gets is materialised from the compact record the first time a key of
// the subject is looked up, and kept (in the record) until the subject changes: an idle subject
// costs only its record, an active one also its Subject.
//
// Locking. Keys are split into kShards shards by digest; FindByDigest takes the shared lock of one
// shard and nothing else. Everything else (the subject arena, the id sets, the admin lookups) is
// guarded by `mu`. A writer holds `mu` exclusively, plus the lock of every shard whose keys it
// changes, plus every shard lock when it changes what FindByDigest reads of a subject (its
// fields, the subject arena's block list, the plan names). Order: `mu`, then shards ascending.

namespace sluice::registry {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr int kShardBits = 4;
constexpr uint32_t kShards = 1u << kShardBits;
constexpr int kSlotBits = 32 - kShardBits;
constexpr uint32_t kSlotMask = (1u << kSlotBits) - 1;
constexpr size_t kPrefixBytes = 8;

// A key reference across shards: the shard in the top bits, the slot in the shard's arena below.
uint32_t MakeRef(uint32_t shard, uint32_t slot) { return shard << kSlotBits | slot; }
uint32_t RefShard(uint32_t ref) { return ref >> kSlotBits; }
uint32_t RefSlot(uint32_t ref) { return ref & kSlotMask; }

uint32_t ShardOf(const Digest& digest) { return digest[0] & (kShards - 1); }

int64_t Micros(absl::Time t) { return absl::ToUnixMicros(t); }
absl::Time FromMicros(int64_t us) { return absl::FromUnixMicros(us); }

// Blocks of 1024 records that never move; freed slots are reused first.
template <typename T>
class Arena {
 public:
  static constexpr int kBlockBits = 10;
  static constexpr uint32_t kBlock = 1u << kBlockBits;

  T& operator[](uint32_t i) { return blocks_[i >> kBlockBits][i & (kBlock - 1)]; }
  const T& operator[](uint32_t i) const { return blocks_[i >> kBlockBits][i & (kBlock - 1)]; }

  void Reserve(size_t n) { blocks_.reserve((n + kBlock - 1) / kBlock); }
  uint32_t Allocate() {
    if (!free_.empty()) {
      const uint32_t slot = free_.back();
      free_.pop_back();
      return slot;
    }
    if (size_ % kBlock == 0) blocks_.push_back(std::make_unique<T[]>(kBlock));
    return size_++;
  }
  // REQUIRES: the record at `slot` has been reset.
  void Free(uint32_t slot) { free_.push_back(slot); }

 private:
  std::vector<std::unique_ptr<T[]>> blocks_;
  uint32_t size_ = 0;
  std::vector<uint32_t> free_;
};

struct SubjectExtra {
  std::string email;
  std::string webhook;
  std::string webhook_secret;
  std::string metadata;
  std::vector<Override> overrides;
  int64_t credits = 0;
};

struct SubjectRec {
  std::string id;  // "" when the slot is free
  int64_t created_us = 0;
  int64_t updated_us = 0;
  std::unique_ptr<const SubjectExtra> extra;  // null: none of its fields set
  // The Subject as FindByDigest hands it out, once made; reset when the subject changes. Guarded
  // by the cache stripe of the record's slot (CacheStripe) for readers; a writer that holds every
  // shard lock and `mu` excludes all readers and needs no stripe.
  mutable std::shared_ptr<const Subject> cache;
  uint32_t first_key = kNone;  // a key ref; the subject's keys are chained through KeyRec::next
  uint16_t plan = 0;           // in GlobalData::plan_names
  bool disabled = false;
};

struct KeyRec {
  Digest digest{};
  uint64_t id = 0;
  int64_t expires_us = kNever;
  int64_t created_us = 0;
  std::unique_ptr<const std::string> name;  // null: ""
  uint32_t subject = kNone;                 // subject slot; kNone when the slot is free
  uint32_t next = kNone;                    // the next key ref of the same subject
  char prefix[kPrefixBytes] = {};           // NUL-padded
};

using SubjectArena = Arena<SubjectRec>;
using KeyArena = Arena<KeyRec>;

// Slot numbers ordered by the subject id they hold; also compares with an id.
struct SubjectLess {
  using is_transparent = void;
  const SubjectArena* arena = nullptr;
  std::string_view Id(uint32_t slot) const { return (*arena)[slot].id; }
  bool operator()(uint32_t a, uint32_t b) const { return Id(a) < Id(b); }
  bool operator()(uint32_t a, std::string_view b) const { return Id(a) < b; }
  bool operator()(std::string_view a, uint32_t b) const { return a < Id(b); }
};

// Slots of one shard's arena hashed and compared by the digest they hold, or with a digest.
struct DigestHash {
  using is_transparent = void;
  const KeyArena* arena = nullptr;
  size_t operator()(const Digest& d) const {
    // SHA-256 output is uniform, but imported digests are chosen by an operator: hash them fully.
    return absl::HashOf(absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
  }
  size_t operator()(uint32_t slot) const { return (*this)((*arena)[slot].digest); }
};
struct DigestEq {
  using is_transparent = void;
  const KeyArena* arena = nullptr;
  const Digest& D(uint32_t slot) const { return (*arena)[slot].digest; }
  const Digest& D(const Digest& d) const { return d; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return D(a) == D(b);
  }
};

struct ShardData {
  KeyArena keys;
  absl::flat_hash_set<uint32_t, DigestHash, DigestEq> by_digest{0, DigestHash{&keys},
                                                                DigestEq{&keys}};
};

// Readers share the shard and global locks, so the cache of a subject, which a reader fills, has
// a lock of its own: one of 64 mutexes by slot. (Not std::atomic<std::shared_ptr>: libstdc++ 12's
// load() releases its internal lock with a relaxed store, a data race ThreadSanitizer reports.)
constexpr size_t kCacheStripes = 64;
struct CacheStripes {
  mutable std::array<std::mutex, kCacheStripes> mu;
  std::mutex& Of(uint32_t slot) const { return mu[slot % kCacheStripes]; }
};

struct GlobalData;

// Key refs hashed and compared by key id, or with a key id.
struct KeyIdHash {
  using is_transparent = void;
  const GlobalData* g = nullptr;
  size_t operator()(uint64_t id) const { return absl::HashOf(id); }
  size_t operator()(uint32_t ref) const;
};
struct KeyIdEq {
  using is_transparent = void;
  const GlobalData* g = nullptr;
  uint64_t Id(uint64_t id) const { return id; }
  uint64_t Id(uint32_t ref) const;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return Id(a) == Id(b);
  }
};

struct GlobalData {
  // Not movable: the functors below point into it.
  GlobalData() = default;
  GlobalData(const GlobalData&) = delete;
  GlobalData& operator=(const GlobalData&) = delete;

  std::array<std::unique_ptr<ShardData>, kShards> shards;  // swapped into Index::State::shards
  SubjectArena subjects;
  absl::btree_set<uint32_t, SubjectLess> by_id{SubjectLess{&subjects}};
  absl::flat_hash_set<uint32_t, KeyIdHash, KeyIdEq> by_key_id{0, KeyIdHash{this}, KeyIdEq{this}};
  // The shard data the key refs point into: shards[i] until the data moves into the Index.
  std::array<ShardData*, kShards> shard_ptrs{};
  std::vector<std::string> plan_names;
  absl::flat_hash_map<std::string, uint16_t> plan_ids;
  std::vector<size_t> plan_counts;  // subjects on each plan
  size_t subject_count = 0;
  size_t key_count = 0;

  KeyRec& KeyAt(uint32_t ref) { return shard_ptrs[RefShard(ref)]->keys[RefSlot(ref)]; }
  const KeyRec& KeyAt(uint32_t ref) const { return shard_ptrs[RefShard(ref)]->keys[RefSlot(ref)]; }

  uint32_t FindSubjectSlot(std::string_view id) const {
    auto it = by_id.find(id);
    return it == by_id.end() ? kNone : *it;
  }
  uint32_t FindKeyRef(uint64_t id) const {
    auto it = by_key_id.find(id);
    return it == by_key_id.end() ? kNone : *it;
  }
  // REQUIRES: every shard lock held when the name is new (FindByDigest reads the names).
  uint16_t InternPlan(const std::string& name) {
    auto [it, inserted] = plan_ids.try_emplace(name, static_cast<uint16_t>(plan_names.size()));
    if (inserted) {
      plan_names.push_back(name);
      plan_counts.push_back(0);
    }
    return it->second;
  }
  std::optional<uint16_t> FindPlan(std::string_view name) const {
    auto it = plan_ids.find(std::string(name));
    if (it == plan_ids.end()) return std::nullopt;
    return it->second;
  }
};

size_t KeyIdHash::operator()(uint32_t ref) const { return (*this)(g->KeyAt(ref).id); }
uint64_t KeyIdEq::Id(uint32_t ref) const { return g->KeyAt(ref).id; }

std::unique_ptr<const SubjectExtra> ExtraOf(Subject& s) {
  const bool plain_metadata = s.metadata.empty() || s.metadata == "{}";
  if (s.email.empty() && s.webhook.empty() && s.webhook_secret.empty() && plain_metadata &&
      s.overrides.empty() && s.credits == 0) {
    return nullptr;
  }
  auto extra = std::make_unique<SubjectExtra>();
  extra->email = std::move(s.email);
  extra->webhook = std::move(s.webhook);
  extra->webhook_secret = std::move(s.webhook_secret);
  if (!plain_metadata) extra->metadata = std::move(s.metadata);
  extra->overrides = std::move(s.overrides);
  extra->credits = s.credits;
  return extra;
}

void FillSubject(SubjectRec& rec, uint16_t plan, Subject& s) {
  rec.created_us = Micros(s.created_at);
  rec.updated_us = Micros(s.updated_at);
  rec.plan = plan;
  rec.disabled = s.disabled;
  rec.extra = ExtraOf(s);
  rec.cache.reset();
}

void FillKey(KeyRec& rec, uint32_t subject, Key& k) {
  rec.digest = k.digest;
  rec.id = k.id;
  rec.expires_us = k.expires_at ? std::min(Micros(*k.expires_at), kNever - 1) : kNever;
  rec.created_us = Micros(k.created_at);
  rec.name = k.name.empty() ? nullptr : std::make_unique<const std::string>(std::move(k.name));
  rec.subject = subject;
  std::memset(rec.prefix, 0, kPrefixBytes);
  std::memcpy(rec.prefix, k.prefix.data(), std::min(k.prefix.size(), kPrefixBytes));
}

std::shared_ptr<const Subject> Materialize(const GlobalData& g, const SubjectRec& rec) {
  auto s = std::make_shared<Subject>();
  s->id = rec.id;
  s->plan = g.plan_names[rec.plan];
  s->disabled = rec.disabled;
  s->created_at = FromMicros(rec.created_us);
  s->updated_at = FromMicros(rec.updated_us);
  if (rec.extra) {
    s->email = rec.extra->email;
    s->webhook = rec.extra->webhook;
    s->webhook_secret = rec.extra->webhook_secret;
    if (!rec.extra->metadata.empty()) s->metadata = rec.extra->metadata;
    s->overrides = rec.extra->overrides;
    s->credits = rec.extra->credits;
  }
  return s;
}

// The cached Subject if there is one, else a fresh one (not cached: admin reads of idle subjects
// should not make them cost more).
std::shared_ptr<const Subject> SubjectOf(const GlobalData& g, const CacheStripes& stripes,
                                         uint32_t slot) {
  const SubjectRec& rec = g.subjects[slot];
  {
    std::lock_guard lock(stripes.Of(slot));
    if (rec.cache) return rec.cache;
  }
  return Materialize(g, rec);
}

Key KeyOf(const GlobalData& g, const KeyRec& rec) {
  Key k;
  k.id = rec.id;
  k.subject = g.subjects[rec.subject].id;
  k.digest = rec.digest;
  k.prefix.assign(rec.prefix, ::strnlen(rec.prefix, kPrefixBytes));
  if (rec.name) k.name = *rec.name;
  if (rec.expires_us != kNever) k.expires_at = FromMicros(rec.expires_us);
  k.created_at = FromMicros(rec.created_us);
  return k;
}

void ResetKey(KeyRec& rec) {
  rec.name.reset();
  rec.subject = kNone;
  rec.next = kNone;
  rec.id = 0;
}

void ResetSubject(SubjectRec& rec) {
  std::string().swap(rec.id);
  rec.extra.reset();
  rec.cache.reset();
  rec.first_key = kNone;
}

}  // namespace

struct Index::State {
  struct Shard {
    mutable std::shared_mutex mu;
    std::unique_ptr<ShardData> data;
  };

  std::mutex writer;                // writers are documented as serial; this makes it so
  std::atomic<bool> loaded{false};  // set by the first Replace
  CacheStripes stripes;
  mutable std::shared_mutex mu;
  std::unique_ptr<GlobalData> g;
  std::array<Shard, kShards> shards;

  // Every shard lock, exclusively, in order.
  std::array<std::unique_lock<std::shared_mutex>, kShards> LockAllShards() {
    std::array<std::unique_lock<std::shared_mutex>, kShards> locks;
    for (uint32_t i = 0; i < kShards; ++i) locks[i] = std::unique_lock(shards[i].mu);
    return locks;
  }

  // Removes the key at `ref` from every structure. REQUIRES: `mu` and the key's shard locked.
  void RemoveKey(uint32_t ref) {
    ShardData& shard = *g->shard_ptrs[RefShard(ref)];
    KeyRec& rec = shard.keys[RefSlot(ref)];
    SubjectRec& subject = g->subjects[rec.subject];
    for (uint32_t* link = &subject.first_key; *link != kNone; link = &g->KeyAt(*link).next) {
      if (*link == ref) {
        *link = rec.next;
        break;
      }
    }
    g->by_key_id.erase(g->by_key_id.find(rec.id));
    shard.by_digest.erase(shard.by_digest.find(rec.digest));
    ResetKey(rec);
    shard.keys.Free(RefSlot(ref));
    --g->key_count;
  }
};

Index::Index() : state_(std::make_unique<State>()) {
  state_->g = std::make_unique<GlobalData>();
  for (uint32_t i = 0; i < kShards; ++i) {
    state_->shards[i].data = std::make_unique<ShardData>();
    state_->g->shard_ptrs[i] = state_->shards[i].data.get();
  }
}

Index::~Index() = default;

Index::KeyLookup Index::FindByDigest(const Digest& digest, absl::Time now) const {
  const State::Shard& shard = state_->shards[ShardOf(digest)];
  std::shared_lock lock(shard.mu);
  const ShardData& data = *shard.data;
  auto it = data.by_digest.find(digest);
  if (it == data.by_digest.end()) return {};
  const KeyRec& key = data.keys[*it];
  if (Micros(now) >= key.expires_us) return {.state = KeyState::kExpired, .key_id = key.id};
  const SubjectRec& rec = state_->g->subjects[key.subject];
  std::mutex& stripe = state_->stripes.Of(key.subject);
  std::shared_ptr<const Subject> subject;
  {
    std::lock_guard cache_lock(stripe);
    subject = rec.cache;
  }
  if (!subject) {
    // Made outside the stripe; of two readers making one, the first to store it wins.
    std::shared_ptr<const Subject> fresh = Materialize(*state_->g, rec);
    std::lock_guard cache_lock(stripe);
    if (!rec.cache) rec.cache = std::move(fresh);
    subject = rec.cache;
  }
  return {.state = KeyState::kValid, .subject = std::move(subject), .key_id = key.id};
}

std::shared_ptr<const Subject> Index::FindSubject(std::string_view id) const {
  std::shared_lock lock(state_->mu);
  const GlobalData& g = *state_->g;
  const uint32_t slot = g.FindSubjectSlot(id);
  return slot == kNone ? nullptr : SubjectOf(g, state_->stripes, slot);
}

std::optional<Key> Index::FindKey(uint64_t id) const {
  std::shared_lock lock(state_->mu);
  const GlobalData& g = *state_->g;
  const uint32_t ref = g.FindKeyRef(id);
  if (ref == kNone) return std::nullopt;
  return KeyOf(g, g.KeyAt(ref));
}

std::vector<Key> Index::KeysOf(std::string_view subject) const {
  std::shared_lock lock(state_->mu);
  const GlobalData& g = *state_->g;
  std::vector<Key> keys;
  const uint32_t slot = g.FindSubjectSlot(subject);
  if (slot == kNone) return keys;
  for (uint32_t ref = g.subjects[slot].first_key; ref != kNone; ref = g.KeyAt(ref).next) {
    keys.push_back(KeyOf(g, g.KeyAt(ref)));
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.id < b.id; });
  return keys;
}

bool Index::HasDigest(const Digest& digest) const {
  const State::Shard& shard = state_->shards[ShardOf(digest)];
  std::shared_lock lock(shard.mu);
  return shard.data->by_digest.contains(digest);
}

Index::Page Index::List(std::string_view plan, std::string_view after, size_t limit) const {
  std::shared_lock lock(state_->mu);
  const GlobalData& g = *state_->g;
  Page page;
  std::optional<uint16_t> plan_id;
  if (!plan.empty()) {
    plan_id = g.FindPlan(plan);
    if (!plan_id || g.plan_counts[*plan_id] == 0) return page;
  }
  auto it = after.empty() ? g.by_id.begin() : g.by_id.upper_bound(after);
  for (; it != g.by_id.end() && limit > 0; ++it) {
    const SubjectRec& rec = g.subjects[*it];
    if (plan_id && rec.plan != *plan_id) continue;
    if (page.subjects.size() == limit) {
      page.next_cursor = page.subjects.back()->id;  // there is at least one more
      break;
    }
    page.subjects.push_back(SubjectOf(g, state_->stripes, *it));
  }
  return page;
}

size_t Index::CountOnPlan(std::string_view plan, size_t max,
                          std::vector<std::string>* first) const {
  std::shared_lock lock(state_->mu);
  const GlobalData& g = *state_->g;
  if (first != nullptr) first->clear();
  const std::optional<uint16_t> plan_id = g.FindPlan(plan);
  if (!plan_id) return 0;
  const size_t count = g.plan_counts[*plan_id];
  if (first != nullptr && max > 0 && count > 0) {
    for (auto it = g.by_id.begin(); it != g.by_id.end() && first->size() < max; ++it) {
      const SubjectRec& rec = g.subjects[*it];
      if (rec.plan == *plan_id) first->push_back(rec.id);
    }
  }
  return count;
}

bool Index::loaded() const { return state_->loaded.load(std::memory_order_acquire); }

size_t Index::subject_count() const {
  std::shared_lock lock(state_->mu);
  return state_->g->subject_count;
}

size_t Index::key_count() const {
  std::shared_lock lock(state_->mu);
  return state_->g->key_count;
}

void Index::PutSubject(Subject subject) {
  std::lock_guard writer(state_->writer);
  std::unique_lock lock(state_->mu);
  auto shard_locks = state_->LockAllShards();
  GlobalData& g = *state_->g;
  const uint16_t plan = g.InternPlan(subject.plan);
  uint32_t slot = g.FindSubjectSlot(subject.id);
  if (slot == kNone) {
    slot = g.subjects.Allocate();
    g.subjects[slot].id = std::move(subject.id);
    g.by_id.insert(slot);
    ++g.subject_count;
  } else {
    --g.plan_counts[g.subjects[slot].plan];
  }
  ++g.plan_counts[plan];
  FillSubject(g.subjects[slot], plan, subject);
}

void Index::DeleteSubject(std::string_view id) {
  std::lock_guard writer(state_->writer);
  std::unique_lock lock(state_->mu);
  GlobalData& g = *state_->g;
  const uint32_t slot = g.FindSubjectSlot(id);
  if (slot == kNone) return;
  auto shard_locks = state_->LockAllShards();
  SubjectRec& rec = g.subjects[slot];
  while (rec.first_key != kNone) state_->RemoveKey(rec.first_key);
  g.by_id.erase(slot);  // before the id is cleared: the set compares by it
  --g.plan_counts[rec.plan];
  --g.subject_count;
  ResetSubject(rec);
  g.subjects.Free(slot);
}

void Index::AddKey(Key key) {
  std::lock_guard writer(state_->writer);
  std::unique_lock lock(state_->mu);
  GlobalData& g = *state_->g;
  const uint32_t subject = g.FindSubjectSlot(key.subject);
  if (subject == kNone) return;  // REQUIRES violated: nothing to attach the key to
  const uint32_t shard_no = ShardOf(key.digest);
  ShardData& shard = *g.shard_ptrs[shard_no];
  const uint32_t old_by_id = g.FindKeyRef(key.id);
  {
    // A key replacing another (same id or same digest) is first removed; that may take any shard.
    auto same_digest = shard.by_digest.find(key.digest);
    if (old_by_id != kNone || same_digest != shard.by_digest.end()) {
      auto shard_locks = state_->LockAllShards();
      if (old_by_id != kNone) state_->RemoveKey(old_by_id);
      same_digest = shard.by_digest.find(key.digest);
      if (same_digest != shard.by_digest.end()) state_->RemoveKey(MakeRef(shard_no, *same_digest));
    }
  }
  std::unique_lock shard_lock(state_->shards[shard_no].mu);
  const uint32_t slot = shard.keys.Allocate();
  const uint32_t ref = MakeRef(shard_no, slot);
  KeyRec& rec = shard.keys[slot];
  FillKey(rec, subject, key);
  rec.next = g.subjects[subject].first_key;
  g.subjects[subject].first_key = ref;
  shard.by_digest.insert(slot);
  g.by_key_id.insert(ref);
  ++g.key_count;
}

void Index::RevokeKey(uint64_t id) {
  std::lock_guard writer(state_->writer);
  std::unique_lock lock(state_->mu);
  const uint32_t ref = state_->g->FindKeyRef(id);
  if (ref == kNone) return;
  std::unique_lock shard_lock(state_->shards[RefShard(ref)].mu);
  state_->RemoveKey(ref);
}

void Index::Replace(std::vector<Subject> subjects, std::vector<Key> keys) {
  std::lock_guard writer(state_->writer);
  // Built aside, without any lock readers wait for, then swapped in.
  auto g = std::make_unique<GlobalData>();
  for (uint32_t i = 0; i < kShards; ++i) {
    g->shards[i] = std::make_unique<ShardData>();
    g->shard_ptrs[i] = g->shards[i].get();
  }
  // Subjects go in in id order, so that the ordered set is built by appending and slot numbers
  // follow the ids. A source that already gives them in order (the SQLite backend does) skips
  // the sort; otherwise positions are sorted (cheaper than moving Subjects), ties by position so
  // that the last of equal ids counts.
  const auto id_less = [](const Subject& a, const Subject& b) { return a.id < b.id; };
  std::vector<uint32_t> order;
  if (!std::is_sorted(subjects.begin(), subjects.end(), id_less)) {
    order.resize(subjects.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&subjects](uint32_t a, uint32_t b) {
      const int c = subjects[a].id.compare(subjects[b].id);
      return c < 0 || (c == 0 && a < b);
    });
  }
  const auto nth = [&](size_t i) -> Subject& { return subjects[order.empty() ? i : order[i]]; };
  g->subjects.Reserve(subjects.size());
  for (size_t i = 0; i < subjects.size(); ++i) {
    if (i + 1 < subjects.size() && nth(i + 1).id == nth(i).id) continue;  // the last one counts
    Subject& s = nth(i);
    const uint32_t slot = g->subjects.Allocate();  // 0, 1, 2...: a fresh arena has no free slots
    SubjectRec& rec = g->subjects[slot];
    const uint16_t plan = g->InternPlan(s.plan);
    ++g->plan_counts[plan];
    rec.id = std::move(s.id);
    FillSubject(rec, plan, s);
    g->by_id.insert(g->by_id.end(), slot);
    ++g->subject_count;
  }
  const uint32_t subject_slots = static_cast<uint32_t>(g->subject_count);

  // The subject slot of each key: by a merge when the keys come grouped in subject order (as the
  // SQLite backend gives them), else through a map of ids.
  const bool keys_in_order = std::is_sorted(
      keys.begin(), keys.end(), [](const Key& a, const Key& b) { return a.subject < b.subject; });
  absl::flat_hash_map<absl::string_view, uint32_t> slot_of;
  if (!keys_in_order) {
    slot_of.reserve(subject_slots);
    for (uint32_t slot = 0; slot < subject_slots; ++slot) {
      slot_of.emplace(absl::string_view(g->subjects[slot].id), slot);
    }
  }
  uint32_t cursor = 0;  // the merge: the first slot whose id is not less than the key's subject
  const auto subject_of = [&](const Key& k) -> uint32_t {
    if (!keys_in_order) {
      auto it = slot_of.find(ToAbsl(k.subject));
      return it == slot_of.end() ? kNone : it->second;
    }
    while (cursor < subject_slots && g->subjects[cursor].id < k.subject) ++cursor;
    return cursor < subject_slots && g->subjects[cursor].id == k.subject ? cursor : kNone;
  };

  std::array<size_t, kShards> per_shard{};
  for (const Key& k : keys) ++per_shard[ShardOf(k.digest)];
  for (uint32_t i = 0; i < kShards; ++i) {
    g->shards[i]->keys.Reserve(per_shard[i]);
    g->shards[i]->by_digest.reserve(per_shard[i]);
  }
  g->by_key_id.reserve(keys.size());
  for (Key& k : keys) {
    const uint32_t subject = subject_of(k);
    // Keys of absent subjects and repeated digests or ids are dropped (a consistent source has
    // none).
    if (subject == kNone) continue;
    const uint32_t shard_no = ShardOf(k.digest);
    ShardData& shard = *g->shards[shard_no];
    const uint32_t slot = shard.keys.Allocate();
    KeyRec& rec = shard.keys[slot];
    FillKey(rec, subject, k);
    const uint32_t ref = MakeRef(shard_no, slot);
    // Filled first, then inserted: the sets hash and compare through the record.
    if (!shard.by_digest.insert(slot).second) {
      ResetKey(rec);
      shard.keys.Free(slot);
      continue;
    }
    if (!g->by_key_id.insert(ref).second) {
      shard.by_digest.erase(slot);
      ResetKey(rec);
      shard.keys.Free(slot);
      continue;
    }
    SubjectRec& owner = g->subjects[subject];
    rec.next = owner.first_key;
    owner.first_key = ref;
    ++g->key_count;
  }

  std::unique_ptr<GlobalData> old;
  std::array<std::unique_ptr<ShardData>, kShards> old_shards;
  {
    std::unique_lock lock(state_->mu);
    auto shard_locks = state_->LockAllShards();
    for (uint32_t i = 0; i < kShards; ++i) old_shards[i] = std::move(state_->shards[i].data);
    for (uint32_t i = 0; i < kShards; ++i) state_->shards[i].data = std::move(g->shards[i]);
    old = std::exchange(state_->g, std::move(g));
  }
  // `old` and `old_shards` are freed here, after the locks.
  state_->loaded.store(true, std::memory_order_release);
}

}  // namespace sluice::registry
