#include "engine/tokenizer_detokenizer.h"

#include "common/status.h"
#include "engine/tokenizer/stream_decoder.h"

namespace exa::engine {
namespace {

class Stream final : public TextStream {
 public:
  explicit Stream(const Tokenizer& tokenizer) : decoder_(tokenizer, /*skip_special_tokens=*/true) {}
  std::string Push(int32_t token) override { return decoder_.Push(token); }
  std::string Flush() override { return decoder_.Flush(); }

 private:
  StreamDecoder decoder_;
};

}  // namespace

std::unique_ptr<TextStream> TokenizerDetokenizer::NewStream() const {
  return std::make_unique<Stream>(*tokenizer_);
}

absl::StatusOr<std::shared_ptr<const TokenizerDetokenizer>> LoadDetokenizer(
    const std::string& model_dir) {
  EXA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                       Tokenizer::FromFile(model_dir + "/tokenizer.json"));
  return std::make_shared<const TokenizerDetokenizer>(std::move(tokenizer));
}

}  // namespace exa::engine
