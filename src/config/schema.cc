#include "config/schema.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "common/chars.h"
#include "common/check.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace exa::config {

// A registered key: how to parse it from text and how to print it.
struct Schema::Field {
  std::string path;
  std::string help;
  // Parses `text`, validates and stores; returns an error message without the key, or "".
  std::function<std::string(std::string_view text)> set;
  // Stores a YAML sequence (lists only); null for scalar fields.
  std::function<std::string(const YAML::Node& node)> set_sequence;
  std::function<std::string()> print;
};

namespace {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out.append("\\n");
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

template <typename Int>
std::string ParseInt(std::string_view text, Int* out) {
  std::string s(StripWhitespace(text));
  if (s.empty()) return "expected an integer, got an empty value";
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) return StrCat("\"", s, "\": expected an integer");
  // Compared as unsigned only when positive: a negative value cast to unsigned is huge, which
  // refused every negative setting of a signed key (-1 was "out of range [-2147483648, ...]").
  if (v < static_cast<long long>(std::numeric_limits<Int>::min()) ||
      (v > 0 && static_cast<unsigned long long>(v) >
                    static_cast<unsigned long long>(std::numeric_limits<Int>::max()))) {
    return StrCat("\"", s, "\": out of range [", +std::numeric_limits<Int>::min(), ", ",
                  +std::numeric_limits<Int>::max(), "]");
  }
  *out = static_cast<Int>(v);
  return "";
}

std::string ParseValue(std::string_view text, std::string* out) {
  *out = std::string(text);
  return "";
}
std::string ParseValue(std::string_view text, bool* out) {
  std::string_view s = StripWhitespace(text);
  if (s == "true" || s == "yes" || s == "on" || s == "1") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off" || s == "0") {
    *out = false;
  } else {
    return StrCat("\"", s, "\": expected true or false");
  }
  return "";
}
std::string ParseValue(std::string_view text, int* out) { return ParseInt(text, out); }
std::string ParseValue(std::string_view text, int64_t* out) { return ParseInt(text, out); }
std::string ParseValue(std::string_view text, uint16_t* out) { return ParseInt(text, out); }
std::string ParseValue(std::string_view text, uint32_t* out) { return ParseInt(text, out); }
std::string ParseValue(std::string_view text, double* out) {
  std::string s(StripWhitespace(text));
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') return StrCat("\"", s, "\": expected a number");
  *out = v;
  return "";
}
std::string ParseValue(std::string_view text, Bytes* out) {
  auto v = ParseBytes(text);
  if (!v.ok()) return std::string(v.status().message());
  out->value = *v;
  return "";
}
std::string ParseValue(std::string_view text, absl::Duration* out) {
  auto v = ParseDuration(text);
  if (!v.ok()) return std::string(v.status().message());
  *out = *v;
  return "";
}
std::string ParseValue(std::string_view text, std::vector<std::string>* out) {
  out->clear();
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = StripWhitespace(rest.substr(0, comma));
    if (!item.empty()) out->emplace_back(item);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return "";
}

std::string Print(const std::string& v) { return Quote(v); }
std::string Print(bool v) { return v ? "true" : "false"; }
std::string Print(int v) { return StrCat(v); }
std::string Print(int64_t v) { return StrCat(v); }
std::string Print(uint16_t v) { return StrCat(v); }
std::string Print(uint32_t v) { return StrCat(v); }
std::string Print(double v) { return StrCat(v); }
// --print-config output must load back to the same value: BytesToString rounds a value that is
// no whole binary unit ("15.62Ki" for 16000), so such a value prints as its plain byte count.
std::string Print(const Bytes& v) {
  std::string text = BytesToString(v.value);
  absl::StatusOr<uint64_t> parsed = ParseBytes(text);
  return parsed.ok() && *parsed == v.value ? text : StrCat(v.value);
}
std::string Print(const absl::Duration& v) { return DurationToString(v); }
std::string Print(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) StrAppend(&out, i ? ", " : "", Quote(v[i]));
  return out + "]";
}

std::string YamlLocation(std::string_view source, const YAML::Mark& mark) {
  if (mark.is_null()) return std::string(source);
  return StrCat(source, ":", mark.line + 1, ":", mark.column + 1);
}

// Parses documents without building them, stopping at the second: whether `in` holds more than
// one, so that a second is refused rather than silently ignored. (YAML::LoadAll would build every
// document, however many a hostile file holds.)
bool MoreThanOneDocument(std::istream& in) {
  struct Ignore final : YAML::EventHandler {
    void OnDocumentStart(const YAML::Mark&) override {}
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  } ignore;
  YAML::Parser parser(in);
  int documents = 0;
  while (documents < 2 && parser.HandleNextDocument(ignore)) ++documents;
  return documents > 1;
}

}  // namespace

std::string YamlParseError(const std::exception& e) {
  if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&e)) {
    return StrCat("nested more than ", deep->depth() - 1, " levels deep");
  }
  if (const auto* parse = dynamic_cast<const YAML::ParserException*>(&e)) return parse->msg;
  return e.what();
}

Schema::Schema() = default;
Schema::~Schema() = default;

template <typename T>
void Schema::Add(std::string path, T* field, std::string help, Validator<T> validator) {
  auto f = std::make_unique<Field>();
  f->path = std::move(path);
  f->help = std::move(help);
  f->set = [field, validator](std::string_view text) -> std::string {
    T parsed = *field;
    std::string error = ParseValue(text, &parsed);
    if (error.empty() && validator) error = validator(parsed);
    if (error.empty()) *field = std::move(parsed);
    return error;
  };
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    f->set_sequence = [field, validator](const YAML::Node& node) -> std::string {
      std::vector<std::string> parsed;
      for (const YAML::Node& item : node) {
        if (!item.IsScalar()) return "expected a list of strings";
        parsed.push_back(item.Scalar());
      }
      std::string error = validator ? validator(parsed) : "";
      if (error.empty()) *field = std::move(parsed);
      return error;
    };
  }
  f->print = [field] { return Print(*field); };
  AddField(std::move(f));
}

template void Schema::Add(std::string, std::string*, std::string, Validator<std::string>);
template void Schema::Add(std::string, bool*, std::string, Validator<bool>);
template void Schema::Add(std::string, int*, std::string, Validator<int>);
template void Schema::Add(std::string, int64_t*, std::string, Validator<int64_t>);
template void Schema::Add(std::string, uint16_t*, std::string, Validator<uint16_t>);
template void Schema::Add(std::string, uint32_t*, std::string, Validator<uint32_t>);
template void Schema::Add(std::string, double*, std::string, Validator<double>);
template void Schema::Add(std::string, Bytes*, std::string, Validator<Bytes>);
template void Schema::Add(std::string, absl::Duration*, std::string, Validator<absl::Duration>);
template void Schema::Add(std::string, std::vector<std::string>*, std::string,
                          Validator<std::vector<std::string>>);

void Schema::AddEnum(std::string path, std::string* field, std::vector<std::string> allowed,
                     std::string help) {
  Validator<std::string> check = [allowed](const std::string& v) -> std::string {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return "";
    std::string list;
    for (const std::string& a : allowed) StrAppend(&list, list.empty() ? "" : ", ", a);
    return StrCat(Quote(v), ": expected one of ", list);
  };
  Add(std::move(path), field, std::move(help), std::move(check));
}

void Schema::AddField(std::unique_ptr<Field> field) {
  EXA_CHECK(Find(field->path) == nullptr) << "config key registered twice: " << field->path;
  EXA_CHECK(field->path.find('.') != std::string::npos)
      << "config key needs a section: " << field->path;
  fields_.push_back(std::move(field));
}

const Schema::Field* Schema::Find(std::string_view path) const {
  for (const auto& f : fields_) {
    if (f->path == path) return f.get();
  }
  return nullptr;
}

bool Schema::Has(std::string_view path) const { return Find(path) != nullptr; }

std::string Schema::Suggest(std::string_view path) const {
  const Field* best = nullptr;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& f : fields_) {
    size_t d = EditDistance(path, f->path);
    if (d < best_distance) {
      best_distance = d;
      best = f.get();
    }
  }
  // Beyond a third of the key, a "suggestion" is noise; list the section instead.
  if (best == nullptr || best_distance > std::max<size_t>(3, path.size() / 3)) {
    std::string sections;
    std::vector<std::string> seen;
    for (const auto& f : fields_) {
      std::string section = f->path.substr(0, f->path.find('.'));
      if (std::find(seen.begin(), seen.end(), section) != seen.end()) continue;
      seen.push_back(section);
      StrAppend(&sections, sections.empty() ? "" : ", ", section);
    }
    return StrCat("valid sections: ", sections, " (see exaserved --print-config)");
  }
  return StrCat("did you mean \"", best->path, "\"?");
}

absl::Status Schema::Set(std::string_view path, std::string_view value, std::string_view source) {
  const Field* f = Find(path);
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(source, ": unknown key \"", path, "\"; ", Suggest(path)));
  }
  std::string error = f->set(value);
  if (!error.empty()) return absl::InvalidArgumentError(StrCat(source, ": ", path, " ", error));
  return absl::OkStatus();
}

std::string PositiveBytes(const Bytes& v) { return v.value > 0 ? "" : "0: must be more than 0"; }

std::string PositiveDuration(const absl::Duration& v) {
  return v > absl::ZeroDuration() ? "" : StrCat(DurationToString(v), ": must be more than 0");
}

Validator<Bytes> BytesBetween(uint64_t lo, uint64_t hi) {
  return [lo, hi](const Bytes& v) {
    return v.value >= lo && v.value <= hi ? std::string()
                                          : StrCat(BytesToString(v.value), ": expected ",
                                                   BytesToString(lo), " to ", BytesToString(hi));
  };
}

absl::Status Schema::LoadYamlFile(const std::string& path) {
  YAML::Node root;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(StrCat(path, ": is a directory, not a config file"));
  }
  try {
    root = YAML::LoadFile(path);
    std::ifstream in(path);
    if (MoreThanOneDocument(in)) {
      return absl::InvalidArgumentError(
          StrCat(path, ": more than one YAML document; a config file holds one"));
    }
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(StrCat(path, ": cannot read config file: ", std::strerror(errno)));
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(
        StrCat(YamlLocation(path, e.mark), ": invalid YAML: ", YamlParseError(e)));
  } catch (const std::exception& e) {  // an I/O failure while reading
    return absl::InvalidArgumentError(StrCat(path, ": cannot read config file: ", e.what()));
  }
  return WalkYaml(root, "", path);
}

absl::Status Schema::LoadYamlString(std::string_view text, std::string_view source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
    std::istringstream in{std::string(text)};
    if (MoreThanOneDocument(in)) {
      return absl::InvalidArgumentError(
          StrCat(source_name, ": more than one YAML document; a config file holds one"));
    }
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(
        StrCat(YamlLocation(source_name, e.mark), ": invalid YAML: ", YamlParseError(e)));
  }
  return WalkYaml(root, "", source_name);
}

absl::Status Schema::WalkYaml(const YAML::Node& node, const std::string& prefix,
                              std::string_view source) {
  if (node.IsNull()) return absl::OkStatus();  // an empty file or section sets nothing
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(StrCat(YamlLocation(source, node.Mark()), ": ",
                                             prefix.empty() ? "the document" : prefix,
                                             " must be a mapping of keys to values"));
  }
  std::set<std::string> seen;  // yaml-cpp keeps duplicate keys; the last would win silently
  for (const auto& kv : node) {
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
    std::string path = prefix.empty() ? key : StrCat(prefix, ".", key);
    std::string where = YamlLocation(source, kv.first.Mark());
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(StrCat(where, ": ", path, " appears twice"));
    }
    if (const Field* f = Find(path)) {
      std::string error;
      if (kv.second.IsSequence() && f->set_sequence) {
        error = f->set_sequence(kv.second);
      } else if (kv.second.IsScalar()) {
        error = f->set(kv.second.Scalar());
      } else if (kv.second.IsNull()) {
        error = "has no value";
      } else {
        error = "expected a single value, got a mapping or list";
      }
      if (!error.empty()) {
        return absl::InvalidArgumentError(
            StrCat(YamlLocation(source, kv.second.Mark()), ": ", path, " ", error));
      }
      continue;
    }
    bool is_section = std::any_of(fields_.begin(), fields_.end(), [&](const auto& f) {
      return f->path.size() > path.size() && f->path.compare(0, path.size(), path) == 0 &&
             f->path[path.size()] == '.';
    });
    if (!is_section) {
      return absl::InvalidArgumentError(
          StrCat(where, ": unknown key \"", path, "\"; ", Suggest(path)));
    }
    EXA_RETURN_IF_ERROR(WalkYaml(kv.second, path, source));
  }
  return absl::OkStatus();
}

std::string Schema::EnvName(std::string_view path) {
  std::string out = "EXASERVE_";
  for (char c : path) out.push_back(c == '.' ? '_' : static_cast<char>(std::toupper(c)));
  return out;
}

absl::Status Schema::LoadEnvironment(const char* const* envp) {
  constexpr std::string_view kPrefix = "EXASERVE_";
  for (; envp != nullptr && *envp != nullptr; ++envp) {
    std::string_view entry = *envp;
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = entry.substr(0, eq);
    std::string_view value = entry.substr(eq + 1);
    // exaserve-cli's own variables share the prefix; they are not daemon configuration (and a
    // shell set up for the CLI must not stop the daemon). EXASERVE_WEIGHTS_ORIGIN is both.
    static constexpr std::string_view kCliOnly[] = {"EXASERVE_TOKEN",     "EXASERVE_TLS_CA",
                                                    "EXASERVE_TLS_CERT",  "EXASERVE_TLS_KEY",
                                                    "EXASERVE_CACHE_DIR", "EXASERVE_RACK_CACHE"};
    if (std::find(std::begin(kCliOnly), std::end(kCliOnly), name) != std::end(kCliOnly)) continue;
    // Sections have no underscore, so the first one after the prefix ends the section.
    const std::string rest = AsciiLower(name.substr(kPrefix.size()));
    size_t split = rest.find('_');
    std::string path = split == std::string::npos
                           ? rest
                           : StrCat(std::string_view(rest).substr(0, split), ".",
                                    std::string_view(rest).substr(split + 1));
    EXA_RETURN_IF_ERROR(Set(path, value, StrCat("environment ", name)));
  }
  return absl::OkStatus();
}

std::string Schema::ToYaml() const {
  std::string out = "# ExaServe effective configuration (defaults < file < environment < flags)\n";
  // Each section once (keys may be registered from several places), in order of first
  // registration: a section printed twice would be a duplicate key when loaded back.
  std::vector<std::string> sections;
  for (const auto& f : fields_) {
    std::string section = f->path.substr(0, f->path.find('.'));
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      sections.push_back(std::move(section));
    }
  }
  for (const std::string& section : sections) {
    StrAppend(&out, "\n", section, ":\n");
    for (const auto& f : fields_) {
      const size_t dot = f->path.find('.');
      if (f->path.compare(0, dot, section) != 0 || dot != section.size()) continue;
      StrAppend(&out, "  # ", f->help, "\n  ", f->path.substr(dot + 1), ": ", f->print(), "\n");
    }
  }
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace exa::config
