// A text table for the CLI's listings: each column as wide as its widest cell, two spaces
// apart, so long values (all five roles, a full node id) never push a row out of line.
// Thread-safety: plain data.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace exa::tools {

class Table {
 public:
  // `right`: columns (by index) whose cells are right-aligned, such as counts.
  explicit Table(std::vector<std::string> headers, std::vector<size_t> right = {});
  void Add(std::vector<std::string> row);  // one cell per header; missing cells print empty
  bool empty() const { return rows_.empty(); }
  // The header line, then the rows in the order added; the last column is not padded.
  void Print(std::FILE* out = stdout) const;

 private:
  std::vector<std::string> headers_;
  std::vector<size_t> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace exa::tools
