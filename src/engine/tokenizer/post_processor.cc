#include "engine/tokenizer/post_processor.h"

#include "common/status.h"
#include "common/strings.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/parse_helpers.h"

namespace exa::engine {
namespace {

namespace jf = json_fields;

// The ids that go before and after the sequence.
class Surround final : public PostProcessor {
 public:
  Surround(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void Process(std::vector<int32_t>* ids) const override {
    ids->insert(ids->begin(), before_.begin(), before_.end());
    ids->insert(ids->end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_;
  std::vector<int32_t> after_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Process(std::vector<int32_t>* ids) const override {
    for (const auto& step : steps_) step->Process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// The ids of special token `name` in TemplateProcessing.special_tokens.
absl::StatusOr<std::vector<int32_t>> TemplateTokenIds(const jf::Json& node, const std::string& name,
                                                      const std::string& path) {
  const std::string table_path = jf::Child(path, "special_tokens");
  const jf::Json* table = jf::Find(node, "special_tokens");
  if (table == nullptr) return jf::Missing(table_path);
  EXA_RETURN_IF_ERROR(jf::ExpectObject(*table, table_path));
  const jf::Json* entry = jf::Find(*table, name);
  const std::string entry_path = jf::Child(table_path, jf::Show(std::string_view(name)));
  if (entry == nullptr) return jf::Missing(entry_path);
  EXA_RETURN_IF_ERROR(jf::ExpectObject(*entry, entry_path));
  const jf::Json* list = jf::Find(*entry, "ids");
  const std::string ids_path = jf::Child(entry_path, "ids");
  if (list == nullptr) return jf::Missing(ids_path);
  EXA_RETURN_IF_ERROR(jf::ExpectArray(*list, ids_path));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < list->size(); ++i) {
    EXA_ASSIGN_OR_RETURN(const int64_t id, jf::IntValue((*list)[i], jf::Child(ids_path, i), 0,
                                                        BpeModel::kMaxTokenId));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

absl::StatusOr<std::unique_ptr<PostProcessor>> ParseTemplate(const jf::Json& node,
                                                             const std::string& path) {
  const std::string single_path = jf::Child(path, "single");
  const jf::Json* single = jf::Find(node, "single");
  if (single == nullptr) return jf::Missing(single_path);
  EXA_RETURN_IF_ERROR(jf::ExpectArray(*single, single_path));
  std::vector<int32_t> before;
  std::vector<int32_t> after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const jf::Json& piece = (*single)[i];
    const std::string piece_path = jf::Child(single_path, i);
    EXA_RETURN_IF_ERROR(jf::ExpectObject(piece, piece_path));
    if (const jf::Json* sequence = jf::Find(piece, "Sequence")) {
      EXA_RETURN_IF_ERROR(jf::ExpectObject(*sequence, jf::Child(piece_path, "Sequence")));
      EXA_ASSIGN_OR_RETURN(const std::string id,
                           jf::String(*sequence, "id", jf::Child(piece_path, "Sequence")));
      if (id != "A" || seen_sequence) {
        return jf::Error(jf::Child(piece_path, "Sequence.id"), id,
                         "a single-sequence template holds sequence A exactly once");
      }
      seen_sequence = true;
    } else if (const jf::Json* special = jf::Find(piece, "SpecialToken")) {
      const std::string special_path = jf::Child(piece_path, "SpecialToken");
      EXA_RETURN_IF_ERROR(jf::ExpectObject(*special, special_path));
      EXA_ASSIGN_OR_RETURN(const std::string name, jf::String(*special, "id", special_path));
      EXA_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, TemplateTokenIds(node, name, path));
      std::vector<int32_t>& side = seen_sequence ? after : before;
      side.insert(side.end(), ids.begin(), ids.end());
    } else {
      return jf::Error(piece_path, piece,
                       "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (!seen_sequence) return jf::Error(single_path, *single, "template has no sequence A");
  return std::make_unique<Surround>(std::move(before), std::move(after));
}

// BertProcessing / RobertaProcessing: {"cls": ["[CLS]", 101], "sep": ["[SEP]", 102]}.
absl::StatusOr<int32_t> PairTokenId(const jf::Json& node, const std::string& key,
                                    const std::string& path) {
  const std::string field = jf::Child(path, key);
  const jf::Json* pair = jf::Find(node, key);
  if (pair == nullptr) return jf::Missing(field);
  if (!pair->is_array() || pair->size() != 2 || !(*pair)[0].is_string()) {
    return jf::Error(field, *pair, "expected [\"token\", id]");
  }
  EXA_ASSIGN_OR_RETURN(const int64_t id,
                       jf::IntValue((*pair)[1], jf::Child(field, 1), 0, BpeModel::kMaxTokenId));
  return static_cast<int32_t>(id);
}

absl::StatusOr<std::unique_ptr<PostProcessor>> ParseSequence(const jf::Json& node,
                                                             const std::string& path, int depth) {
  const std::string list_path = jf::Child(path, "processors");
  const jf::Json* list = jf::Find(node, "processors");
  if (list == nullptr) return jf::Missing(list_path);
  EXA_RETURN_IF_ERROR(jf::ExpectArray(*list, list_path));
  std::vector<std::unique_ptr<PostProcessor>> steps;
  for (size_t i = 0; i < list->size(); ++i) {
    EXA_ASSIGN_OR_RETURN(auto step,
                         ParsePostProcessor((*list)[i], jf::Child(list_path, i), depth + 1));
    steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceProcessor>(std::move(steps));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const jf::Json& node,
                                                                  const std::string& path,
                                                                  int depth) {
  EXA_RETURN_IF_ERROR(CheckDepth(depth, path));
  EXA_RETURN_IF_ERROR(jf::ExpectObject(node, path));
  EXA_ASSIGN_OR_RETURN(const std::string type, jf::String(node, "type", path));
  if (type == "TemplateProcessing") return ParseTemplate(node, path);
  if (type == "Sequence") return ParseSequence(node, path, depth);
  if (type == "ByteLevel")
    return std::make_unique<Surround>(std::vector<int32_t>{}, std::vector<int32_t>{});
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    EXA_ASSIGN_OR_RETURN(const int32_t cls, PairTokenId(node, "cls", path));
    EXA_ASSIGN_OR_RETURN(const int32_t sep, PairTokenId(node, "sep", path));
    return std::make_unique<Surround>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
  }
  return jf::Error(jf::Child(path, "type"), type,
                   "unsupported post-processor; supported: TemplateProcessing, BertProcessing, "
                   "RobertaProcessing, ByteLevel, Sequence");
}

}  // namespace exa::engine
