// Progress through a list of items (tune's and bench's problems) on stderr. On a terminal, one
// line redrawn in place: a bar, i/N, the item in hand and the time left, estimated from the time
// so far. Elsewhere (a file, a pipe, CI logs), one plain line per finished item.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace gemmkit::tools {

class Progress {
 public:
  // A bar where `out` is a terminal.
  explicit Progress(size_t total, std::FILE* out = stderr);
  Progress(size_t total, std::FILE* out, bool bar);
  ~Progress();  // clears the bar
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // The next item begins; the bar names it.
  void begin(const std::string& item);
  // The item in hand is done; `line` is the plain line printed for it where there is no bar.
  void done(const std::string& line);
  // A line shown either way, above the bar on a terminal (a warning, a skipped item).
  void note(const std::string& line);
  // Clears the bar, for output that follows (a table).
  void finish();

  // "[#####...............] 3/12": the bar of `done` items of the total, as plain lines start.
  std::string counter(size_t done) const;
  bool bar() const { return bar_; }

 private:
  std::FILE* out_;
  size_t total_, done_ = 0;
  bool bar_, drawn_ = false;
  std::string item_;
  std::chrono::steady_clock::time_point start_;

  std::string counter(size_t done, size_t number) const;  // filled by `done`, reading number/total
  void draw();
  void clear();
};

// The terminal line: counter, item, time elapsed and left (estimated once an item is done), cut
// to `width` columns.
std::string progress_line(const std::string& counter, const std::string& item, size_t done, size_t total,
                          double elapsed_s, size_t width);

// "42s", "3m05s", "1h02m".
std::string format_duration(double seconds);

}  // namespace gemmkit::tools
