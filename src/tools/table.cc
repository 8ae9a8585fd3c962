#include "tools/table.h"

#include <algorithm>

namespace exa::tools {

Table::Table(std::vector<std::string> headers, std::vector<size_t> right)
    : headers_(std::move(headers)), right_(std::move(right)) {}

void Table::Add(std::vector<std::string> row) {
  row.resize(headers_.size());
  rows_.push_back(std::move(row));
}

void Table::Print(std::FILE* out) const {
  std::vector<size_t> widths(headers_.size());
  for (size_t i = 0; i < headers_.size(); ++i) widths[i] = headers_[i].size();
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      const bool last = i + 1 == row.size();
      const size_t pad = widths[i] - row[i].size();
      const bool right = std::find(right_.begin(), right_.end(), i) != right_.end();
      if (right) line.append(pad, ' ');
      line += row[i];
      if (!right && !last) line.append(pad, ' ');
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(out, "%s\n", line.c_str());
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
}

}  // namespace exa::tools
