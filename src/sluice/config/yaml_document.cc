// The bounded YAML reader (yaml_document.h): yaml-cpp's parse events become plain Values.
#include "sluice/config/yaml_document.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <new>
#include <sstream>
#include <system_error>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace sluice::config::yaml {

const Value kUndefinedValue;

namespace {

std::string AtMark(const YAML::Mark& mark, absl::string_view what) {
  if (mark.is_null()) return std::string(what);
  return absl::StrCat("line ", mark.line + 1, ", column ", mark.column + 1, ": ", what);
}

std::string DescribeYamlError(const YAML::Exception& e) { return AtMark(e.mark, e.msg); }

// Thrown by BoundsCheck's handler to stop the parse; never leaves ParseConfig.
struct OutOfBounds {
  std::string message;
};

// Builds the Values of each document from yaml-cpp's parse events, and throws OutOfBounds when the
// document nests deeper than max_depth, when its values with aliases expanded exceed
// max_values, or when an alias names a value that contains it (a cycle no config field can
// mean). Each check is made before the value it counts is stored, so a hostile document costs at
// most the bounds, and the depth check stops the parse before yaml-cpp's own recursion goes
// further.
class DocumentBuilder : public YAML::EventHandler {
 public:
  explicit DocumentBuilder(const Limits& limits) : limits_(limits) {}

  // The root of each document, in file order (the undefined value for a document whose root was
  // never reported). Valid while this builder lives.
  [[nodiscard]] const std::vector<const Value*>& documents() const { return documents_; }
  // Owns every value of every document.
  [[nodiscard]] std::shared_ptr<const std::deque<Value>> arena() const { return arena_; }

  void OnDocumentStart(const YAML::Mark&) override {
    documents_.push_back(&kUndefinedValue);
    anchors_.clear();  // anchors are numbered per document
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Leaf(mark, anchor, Value::Kind::kNull, std::string());
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      throw OutOfBounds{AtMark(mark, "alias refers to a value containing it")};
    }
    Count(mark, it->second.size);
    Add(it->second.value);
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& text) override {
    Value* value = Leaf(mark, anchor, Value::Kind::kScalar, text);
    value->plain = tag == "?";  // yaml-cpp's tag of a plain scalar ("!" when quoted)
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor, Value::Kind::kSequence);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor, Value::Kind::kMap);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Collection {
    Value* value;
    YAML::anchor_t anchor;
    uint64_t first;              // expanded_ before it opened
    const Value* key = nullptr;  // a map's key still waiting for its value
  };
  struct Anchored {
    const Value* value;
    uint64_t size;  // with aliases expanded
  };

  void Count(const YAML::Mark& mark, uint64_t values) {
    expanded_ += values;
    if (expanded_ > limits_.max_values) {
      throw OutOfBounds{AtMark(mark, absl::StrCat("too many values (more than ", limits_.max_values,
                                                  " with aliases expanded)"))};
    }
  }
  Value* New(Value::Kind kind) {
    Value& value = arena_->emplace_back();
    value.kind = kind;
    return &value;
  }
  // Puts `value` where the document is: its root, the next item of a list, or a map's next key or
  // the value of the key before it.
  void Add(const Value* value) {
    if (open_.empty()) {
      documents_.back() = value;
      return;
    }
    Collection& parent = open_.back();
    if (parent.value->IsSequence()) {
      parent.value->items.push_back(value);
    } else if (parent.key == nullptr) {
      parent.key = value;
    } else {
      parent.value->pairs.emplace_back(parent.key, value);
      parent.key = nullptr;
    }
  }
  Value* Leaf(const YAML::Mark& mark, YAML::anchor_t anchor, Value::Kind kind,
              const std::string& text) {
    Count(mark, 1);
    Value* value = New(kind);
    value->scalar = text;
    if (anchor != YAML::NullAnchor) anchors_[anchor] = {value, 1};
    Add(value);
    return value;
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, Value::Kind kind) {
    if (open_.size() >= limits_.max_depth) {
      throw OutOfBounds{
          AtMark(mark, absl::StrCat("nested too deep (more than ", limits_.max_depth, " levels)"))};
    }
    const uint64_t first = expanded_;
    Count(mark, 1);
    Value* value = New(kind);
    Add(value);
    open_.push_back({.value = value, .anchor = anchor, .first = first});
  }
  void Close() {
    const Collection done = open_.back();
    open_.pop_back();
    if (done.anchor != YAML::NullAnchor) {
      anchors_[done.anchor] = {done.value, expanded_ - done.first};
    }
  }

  const Limits limits_;
  // every value of every document; a deque never moves them
  std::shared_ptr<std::deque<Value>> arena_ = std::make_shared<std::deque<Value>>();
  std::vector<const Value*> documents_;
  uint64_t expanded_ = 0;
  std::vector<Collection> open_;
  std::unordered_map<YAML::anchor_t, Anchored> anchors_;  // each closed anchor of this document
};

// "line L, column C: " of byte `offset` in `text` (both from 1).
std::string AtOffset(absl::string_view text, size_t offset, absl::string_view what) {
  const absl::string_view before = text.substr(0, offset);
  const size_t line_start = before.rfind('\n');
  const size_t column = line_start == absl::string_view::npos ? offset : offset - line_start - 1;
  const size_t line = static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  return absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", what);
}

// What kind of file `mode` is, for "not a regular file (a directory)".
absl::string_view FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// A bound on what ReadRegularFile reads, and how a message writes it ("16 MiB").
struct FileLimit {
  size_t bytes;
  absl::string_view text;
};

absl::Status CheckRegularFile(const struct stat& st, FileLimit limit) {
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a regular file (", FileKind(st.st_mode), ")"));
  }
  if (static_cast<uint64_t>(st.st_size) > limit.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("too large: ", st.st_size, " bytes (at most ", limit.text, ")"));
  }
  return absl::OkStatus();
}

// The whole of the regular file `path`, at most `limit.bytes`. Errors name neither the path nor
// anything read: "cannot open: No such file or directory", "not a regular file (a FIFO)".
absl::StatusOr<std::string> ReadFile(const std::string& path, FileLimit limit) {
  const auto failed = [](absl::string_view what, int error) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", std::generic_category().message(error)));
  };
  // stat first: opening a FIFO would wait for a writer and opening a socket fails obscurely.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return failed("cannot open", errno);
  SLUICE_RETURN_IF_ERROR(CheckRegularFile(st, limit));
  // O_NONBLOCK in case the path was swapped for a FIFO since; fstat checks what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return failed("cannot open", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) return failed("cannot read", errno);
  SLUICE_RETURN_IF_ERROR(CheckRegularFile(st, limit));
  // Read at most one byte past the bound: a file that grew since fstat is still refused.
  std::string text;
  text.resize(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  while (true) {
    if (used == text.size()) {
      if (text.size() > limit.bytes) break;
      text.resize(std::min(text.size() * 2, limit.bytes + 1));
    }
    const ssize_t n = ::read(fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed("cannot read", errno);
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > limit.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("too large: more than ", limit.text));
  }
  text.resize(used);
  return text;
}

}  // namespace

absl::StatusOr<Document> Parse(std::string_view std_text, const Limits& limits) {
  const absl::string_view yaml(std_text.data(), std_text.size());
  const auto error = [](absl::string_view what) {
    return absl::InvalidArgumentError(std::string(what));
  };
  // No exception leaves this function: yaml-cpp's become errors here.
  try {
    if (yaml.size() > limits.max_bytes) {
      return error(absl::StrCat(
          "too large: ", yaml.size(), " bytes (at most ",
          absl::string_view(limits.max_bytes_text.data(), limits.max_bytes_text.size()), ")"));
    }
    if (const size_t nul = yaml.find('\0'); nul != absl::string_view::npos) {
      // yaml-cpp would stop reading there; a NUL byte means this is not a UTF-8 text file.
      const bool utf16_or_32 =
          absl::StartsWith(yaml, "\xff\xfe") || absl::StartsWith(yaml, "\xfe\xff") || nul < 4;
      return error(utf16_or_32 ? "not UTF-8 (looks like UTF-16 or UTF-32; save it as UTF-8)"
                               : AtOffset(yaml, nul, "NUL byte (a YAML file is text)"));
    }
    if (const size_t commas = static_cast<size_t>(std::count(yaml.begin(), yaml.end(), ','));
        commas > limits.max_commas) {
      return error(absl::StrCat("too many values (more than ", limits.max_commas, " commas; got ",
                                commas, ")"));
    }
    DocumentBuilder builder(limits);
    std::istringstream stream{std::string(yaml)};
    YAML::Parser parser(stream);
    while (parser.HandleNextDocument(builder)) {
    }
    std::vector<const Value*> documents = builder.documents();
    // A stray "---" at the end of the file adds an empty document; it holds nothing to lose.
    while (documents.size() > 1 && documents.back()->IsNull()) documents.pop_back();
    if (documents.size() > 1) {
      return error(absl::StrCat("expected one YAML document, found ", documents.size()));
    }
    Document document;
    document.arena_ = builder.arena();
    if (!documents.empty()) document.root_ = documents.front();
    return document;
  } catch (const OutOfBounds& e) {
    return error(e.message);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own limit; the builder's depth bound normally stops the parse well before it.
    return error(AtMark(e.mark, "nested too deep"));
  } catch (const YAML::Exception& e) {
    return error(DescribeYamlError(e));
  } catch (const std::bad_alloc&) {
    return error("out of memory while reading the configuration");
  } catch (const std::exception& e) {
    return error(e.what());
  } catch (...) {
    return error("unexpected error while reading the configuration");
  }
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            std::string_view max_text) {
  return ReadFile(path, FileLimit{max_bytes, absl::string_view(max_text.data(), max_text.size())});
}

}  // namespace sluice::config::yaml

#undef SLUICE_RETURN_IF_ERROR
