// `exaserve-cli chat-template`'s loop (docs/reference/api.md#chat-templates): each input line is a
// JSON object {"messages": [...], "add_generation_prompt": bool, "tools": [...], ...} rendered with
// a model's chat template; each output line is the rendering as a JSON string, or
// {"error": MESSAGE} when that line's render fails (the template's raise_exception included),
// and the loop goes on. Empty lines are skipped.
#pragma once

#include <istream>
#include <ostream>

#include "chat_template/chat_template.h"

namespace exa::chat_template {

// The number of lines that rendered an error.
size_t RenderLines(const ChatTemplate& chat_template, std::istream& in, std::ostream& out,
                   const RenderLimits& limits = {});

}  // namespace exa::chat_template
