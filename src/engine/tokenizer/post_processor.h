// tokenizer.json "post_processor": adds the special tokens around an encoded sequence when
// add_special_tokens is set (e.g. Llama's <s>). Supported: TemplateProcessing (single-sequence
// template), BertProcessing, RobertaProcessing, ByteLevel (ids unchanged) and Sequence.
// Thread safety: immutable after parsing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/json_fields.h"

namespace exa::engine {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void Process(std::vector<int32_t>* ids) const = 0;
};

absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const json_fields::Json& node,
                                                                  const std::string& path,
                                                                  int depth);

}  // namespace exa::engine
