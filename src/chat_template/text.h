// The JavaScript string operations a chat template's strings go through
// (docs/reference/api.md#chat-templates), on UTF-8: what counts as whitespace for trim() and
// split(), lengths and indices in UTF-16 code units, and JSON string quoting as JSON.stringify
// writes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace exa::chat_template {

// JavaScript's WhiteSpace and LineTerminator code points (what String.prototype.trim removes).
bool IsJsWhitespace(uint32_t code_point);
// Decodes the code point at `*pos` and advances it; invalid bytes decode as themselves.
uint32_t NextCodePoint(std::string_view s, size_t* pos);

std::string_view TrimStart(std::string_view s);
std::string_view TrimEnd(std::string_view s);
inline std::string_view Trim(std::string_view s) { return TrimStart(TrimEnd(s)); }

// The code points of `s`, each as its UTF-8 bytes (Array.from on a string).
std::vector<std::string_view> CodePoints(std::string_view s);
// String.prototype.length.
int64_t Utf16Length(std::string_view s);
// String.prototype.at(index) (negative counts from the end); false when out of range. Half of a
// surrogate pair becomes U+FFFD, as it does when JavaScript writes the string out as UTF-8.
bool Utf16At(std::string_view s, int64_t index, std::string* out);

// toUpperCase / toLowerCase: Unicode simple case mapping, with SpecialCasing's unconditional
// ß -> SS and İ -> i̇ (the context-dependent final sigma is not carried over).
std::string JsUpper(std::string_view s);
std::string JsLower(std::string_view s);
// value.replace(/\b\w/g, toUpperCase): \w is ASCII, so only ASCII letters change.
std::string JsTitle(std::string_view s);
// charAt(0).toUpperCase() + slice(1), on the first code point.
std::string JsCapitalize(std::string_view s);
void AppendUtf8(uint32_t code_point, std::string* out);

// JSON.stringify of a string; with `ensure_ascii`, every code unit past 0x7e as \uXXXX.
void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out);

// str.split(None, maxsplit) as @huggingface/jinja has it: runs of non-whitespace.
std::vector<std::string> SplitOnWhitespace(std::string_view s, int64_t maxsplit);
// str.split(sep, maxsplit); `sep` is not empty.
std::vector<std::string> SplitOn(std::string_view s, std::string_view sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0: all. An empty `old` inserts between code points.
std::string ReplaceAll(std::string_view s, std::string_view old_text, std::string_view new_text,
                       int64_t count);

}  // namespace exa::chat_template
